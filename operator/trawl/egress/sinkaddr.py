"""Which addresses a PostgreSQL or S3 sink may connect to.

A job's author chooses its sink's host, and both the workers (writing records) and the operator
(checking the sink when the job is accepted) connect to it. Sinks are usually in-cluster services on
private addresses, or a proxy sidecar on loopback (a Cloud SQL proxy, say), so the fetcher's policy
(global addresses only) would break them. What no sink is, and what a job must not be able to point
the worker or the operator at, is the link-local range: the cloud metadata services answer there
(169.254.169.254, fd00:ec2::254) and hand out the node's or the pod's credentials.

The address is checked where the connection is made, not only where the name is read, so a name that
resolves to a harmless address when checked and to the metadata service a moment later (DNS
rebinding) gains nothing: PostgreSQL connects to the addresses that were checked (libpq ``hostaddr``),
S3's HTTP connections check their peer once connected, before any request (:func:`checked_pool_manager`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from .addresses import BlockedAddressError, IPNetwork, embedded_ipv4

SINK_BLOCKED_NETWORKS: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("169.254.0.0/16"),  # IPv4 link-local: cloud metadata (AWS, GCP, Azure, ...)
    ipaddress.ip_network("fe80::/10"),  # IPv6 link-local
    ipaddress.ip_network("fd00:ec2::254/128"),  # AWS's IPv6 metadata endpoint (a unique-local address)
)


def sink_block_reason(address: str) -> str | None:
    """Why a sink may not connect to ``address``, or None when it may."""
    try:
        addr = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(addr, ipaddress.IPv6Address):
        inner = embedded_ipv4(addr)
        if inner is not None and sink_block_reason(str(inner)) is not None:
            return f"{addr} embeds {inner}, a link-local address (cloud metadata), never a sink"
    for net in SINK_BLOCKED_NETWORKS:
        if addr.version == net.version and addr in net:
            return f"{addr} is in {net}, link-local (cloud metadata), never a sink"
    return None


def _check(host: str, address: str) -> None:
    """:class:`BlockedAddressError` when ``host`` (as named in the spec) at ``address`` is refused."""
    reason = sink_block_reason(address)
    if reason is not None:
        raise BlockedAddressError(f"refused: {reason if address == host else f'{host} resolves to {reason}'}")


def _checked(host: str, infos: list[tuple[Any, ...]]) -> list[str]:
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        _check(host, address)
    return addresses


async def resolve_sink_host(host: str, port: int) -> list[str]:
    """The addresses of ``host``, each allowed for a sink; :class:`BlockedAddressError` (an ``OSError``)
    when any is not (a name that also resolves to the metadata service is refused outright)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return _checked(host, infos)


def _check_peer(conn: HTTPConnection, sock: socket.socket) -> socket.socket:
    try:
        _check(conn.host, str(sock.getpeername()[0]))
    except BlockedAddressError:
        sock.close()
        raise
    return sock


class _CheckedHTTPConnection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        return _check_peer(self, super()._new_conn())


class _CheckedHTTPSConnection(HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        return _check_peer(self, super()._new_conn())


class _CheckedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = _CheckedHTTPConnection


class _CheckedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _CheckedHTTPSConnection


def checked_pool_manager(**kwargs: Any) -> urllib3.PoolManager:
    """A urllib3 pool manager whose connections check their peer address (after connecting, before any
    request is sent) against :data:`SINK_BLOCKED_NETWORKS`."""
    manager = urllib3.PoolManager(**kwargs)
    manager.pool_classes_by_scheme = {"http": _CheckedHTTPConnectionPool, "https": _CheckedHTTPSConnectionPool}
    return manager
