"""Name resolution that checks every address before aiohttp may connect to it (no DNS-rebinding window).

Names are resolved on :mod:`trawl.egress.names`' bounded pool, never the loop's default executor: they
are chosen by job authors (a fetched site, a webhook), and a name whose servers never answer must not
hold the threads that Redis reconnects and the Kubernetes client resolve on."""

from __future__ import annotations

import socket
from collections.abc import Sequence

from aiohttp.abc import AbstractResolver, ResolveResult

from . import names
from .addresses import BlockedAddressError, IPNetwork, address_block_reason


class SafeResolver(AbstractResolver):
    """Resolves names and returns only addresses that pass the block list (raising when none does).

    aiohttp connects to exactly the addresses returned here, so the checked address is the one used.
    """

    def __init__(self, allowed: Sequence[IPNetwork] = ()) -> None:
        self.allowed = tuple(allowed)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            # "localhost." is "localhost": the root's dot is dropped so such a name resolves (and its
            # addresses are checked) like the name without it, instead of failing as a connection error.
            infos = await names.getaddrinfo(host.rstrip(".") or host, port, family=family, flags=socket.AI_ADDRCONFIG)
        except socket.gaierror as exc:
            raise OSError(f"cannot resolve {host}: {exc.strerror}") from exc
        results: list[ResolveResult] = []
        refused: list[str] = []
        for fam, _type, proto, _canon, sockaddr in infos:
            address = str(sockaddr[0])
            reason = address_block_reason(address, self.allowed)
            if reason is not None:
                refused.append(reason)
                continue
            results.append(
                {
                    "hostname": host,
                    "host": address,
                    "port": int(sockaddr[1]),
                    "family": fam,
                    "proto": proto,
                    "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
                }
            )
        if not results:
            if refused:
                raise BlockedAddressError(f"{host} resolves only to blocked addresses: {'; '.join(refused)}")
            raise OSError(f"{host} has no usable address")
        return results

    async def close(self) -> None:
        return None


def find_blocked(exc: BaseException) -> BlockedAddressError | None:
    """The address refusal somewhere in an exception's chain, if any: clients wrap it (aiohttp's
    ``os_error``, urllib3's ``reason`` and ``("Connection aborted.", error)`` arguments, causes)."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        cur = pending.pop(0)
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        if isinstance(cur, BlockedAddressError):
            return cur
        inner = [
            getattr(cur, "os_error", None),
            getattr(cur, "reason", None),
            *cur.args,
            cur.__cause__,
            cur.__context__,
        ]
        pending += [e for e in inner if isinstance(e, BaseException)]
    return None
