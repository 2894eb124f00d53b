"""Which addresses a connection may go to (pure): private, loopback, link-local and metadata ranges are
refused unless an allow-list (a pool's ``worker.allowedCidrs``) names them."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


# Networks that are never fetched unless an allow-list names them. ``is_global`` covers most of them;
# the explicit list documents intent and covers ranges whose flags differ between Python versions.
BLOCKED_NETWORKS: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # carrier-grade NAT
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, cloud metadata (169.254.169.254)
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # TEST-NET-1
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # TEST-NET-2
        "203.0.113.0/24",  # TEST-NET-3
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, broadcast
        "::/128",  # unspecified
        "::1/128",  # loopback
        "::ffff:0:0/96",  # IPv4-mapped (checked again through the embedded IPv4 address)
        "64:ff9b::/96",  # NAT64 (embeds IPv4)
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard
        "2001::/23",  # IETF protocol assignments (Teredo, ORCHID...)
        "2001:db8::/32",  # documentation
        "2002::/16",  # 6to4 (embeds IPv4)
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)


# Every address: only for a connection to a peer a person named on their own command line (``trawl results
# --postgres-address`` through a port-forward), never for one a job's spec names.
EVERY_ADDRESS: tuple[IPNetwork, ...] = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))


class BlockedAddressError(OSError):
    """The peer address is not allowed (SSRF protection)."""


def parse_networks(cidrs: Iterable[str] | None) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(c.strip(), strict=False) for c in cidrs or () if c.strip())


def embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, NAT64, IPv4-compatible), if any."""
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr.teredo is not None:
        return addr.teredo[1]
    packed = addr.packed
    if packed[:12] == bytes(12) and int(addr) > 1:  # deprecated IPv4-compatible ::a.b.c.d
        return ipaddress.IPv4Address(packed[12:])
    if addr in ipaddress.IPv6Network("64:ff9b::/96"):
        return ipaddress.IPv4Address(packed[12:])
    return None


def address_block_reason(address: str | IPAddress, allowed: Sequence[IPNetwork] = ()) -> str | None:
    """Why ``address`` may not be connected to, or None when it may.

    An address inside an allowed network is accepted. IPv6 forms embedding an IPv4 address are judged
    by the IPv4 address, so ``::ffff:169.254.169.254`` is blocked exactly like ``169.254.169.254``.
    """
    try:
        addr = ipaddress.ip_address(address.split("%", 1)[0] if isinstance(address, str) else address)
    except ValueError:
        return f"{address!r} is not an IP address"
    if any(addr.version == net.version and addr in net for net in allowed):
        return None
    if isinstance(addr, ipaddress.IPv6Address):
        inner = embedded_ipv4(addr)
        if inner is not None:
            reason = address_block_reason(inner, allowed)
            return None if reason is None else f"{addr} embeds {inner}: {reason}"
    for net in BLOCKED_NETWORKS:
        if addr.version == net.version and addr in net:
            return f"{addr} is in blocked network {net}"
    if not addr.is_global:
        return f"{addr} is not a global address"
    return None


def check_address(address: str | IPAddress, allowed: Sequence[IPNetwork] = ()) -> None:
    reason = address_block_reason(address, allowed)
    if reason is not None:
        raise BlockedAddressError(reason)


def ip_literal_block_reason(url: str, allowed: Sequence[IPNetwork] = ()) -> str | None:
    """Why ``url``'s host may not be connected to when it is an IP literal (None for a name, or an allowed
    address): such a host bypasses the resolver (:class:`trawl.egress.resolver.SafeResolver` checks names)."""
    host = urlsplit(url).hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    return address_block_reason(host, allowed)
