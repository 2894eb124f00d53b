"""Where a PostgreSQL or S3 sink connects: the one address rule, checked where the connection is made.

A job's author chooses its sink's host, and the workers (writing records) and the operator (checking
the sink when the job is accepted, writing the S3 manifest) connect to it with the pool's credentials.
So a sink follows the rule of every other outbound connection (:func:`~.addresses.address_block_reason`):
global addresses, and the private, loopback or cluster ranges the pool lists in
``worker.allowedCidrs``, nothing else. An in-cluster database or store needs its range there; without
it a job could point the pool's password or access key at any service of the cluster, the node, or
the cloud metadata service (169.254.169.254).

The address is checked where the connection is made, not only where the name is read, so a name that
resolves to a harmless address when checked and to a protected one a moment later (DNS rebinding)
gains nothing: PostgreSQL connects to the addresses that were checked (libpq ``hostaddr``), S3's HTTP
connections resolve, check and connect to the checked address themselves (:func:`checked_pool_manager`),
and never follow a redirect. Names resolve on :mod:`.names`' bounded pool, with a timeout.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util import connection as urllib3_connection

from . import names
from .addresses import BlockedAddressError, IPNetwork, address_block_reason


def _refusal(host: str, address: str, reason: str) -> BlockedAddressError:
    return BlockedAddressError(f"refused: {reason if address == host else f'{host} resolves to {reason}'}")


def checked_addresses(host: str, infos: Sequence[tuple[Any, ...]], allowed: Sequence[IPNetwork]) -> list[str]:
    """The distinct addresses of ``infos`` (``getaddrinfo`` results for ``host``), each allowed;
    :class:`BlockedAddressError` when any is not: a name that also resolves to a protected address is
    refused outright rather than used for its other addresses."""
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        reason = address_block_reason(address, allowed)
        if reason is not None:
            raise _refusal(host, address, reason)
    if not addresses:
        raise OSError(f"{host} has no address")
    return addresses


async def resolve_sink_host(host: str, port: int, allowed: Sequence[IPNetwork]) -> list[str]:
    """The addresses of ``host``, each allowed (``worker.allowedCidrs`` as ``allowed``);
    :class:`BlockedAddressError` (an ``OSError``) when one is not."""
    return checked_addresses(host, await names.getaddrinfo(host, port), allowed)


class _CheckedConnection(HTTPConnection):
    """Resolves its host, checks every address, and connects to a checked one: the socket never reaches a
    refused address (not even a TCP handshake), whatever the name resolves to a moment later."""

    allowed: tuple[IPNetwork, ...] = ()

    def _new_conn(self) -> socket.socket:
        host = self._dns_host.strip("[]")
        try:
            infos = names.getaddrinfo_blocking(host, self.port)
        except socket.gaierror as exc:
            raise NameResolutionError(self.host, self, exc) from exc
        addresses = checked_addresses(host, infos, self.allowed)
        last: OSError | None = None
        for address in addresses:
            try:
                return urllib3_connection.create_connection(
                    (address, self.port),
                    self.timeout,
                    source_address=self.source_address,
                    socket_options=self.socket_options,
                )
            except TimeoutError as exc:
                raise ConnectTimeoutError(self, f"connection to {self.host} timed out") from exc
            except OSError as exc:
                last = exc
        raise NewConnectionError(self, f"Failed to establish a new connection: {last}")


class _CheckedHTTPConnection(_CheckedConnection):
    pass


class _CheckedHTTPSConnection(_CheckedConnection, HTTPSConnection):
    pass


class _NoRedirects(urllib3.PoolManager):
    """S3 never needs a redirect to reach a bucket it was pointed at: a 3xx is handed back as the answer
    (an error for the client) instead of being followed to wherever its Location says."""

    def urlopen(self, method: str, url: str, redirect: bool = True, **kw: Any) -> Any:  # type: ignore[override]
        return super().urlopen(method, url, redirect=False, **kw)


def checked_pool_manager(allowed: Sequence[IPNetwork], **kwargs: Any) -> urllib3.PoolManager:
    """A urllib3 pool manager whose connections go only to addresses the rule allows (``allowed``: the
    pool's ``worker.allowedCidrs``), and which follows no redirect."""
    checked = tuple(allowed)

    class HTTP(_CheckedHTTPConnection):
        allowed = checked

    class HTTPS(_CheckedHTTPSConnection):
        allowed = checked

    class HTTPPool(HTTPConnectionPool):
        ConnectionCls = HTTP

    class HTTPSPool(HTTPSConnectionPool):
        ConnectionCls = HTTPS

    manager = _NoRedirects(**kwargs)
    manager.pool_classes_by_scheme = {"http": HTTPPool, "https": HTTPSPool}
    return manager
