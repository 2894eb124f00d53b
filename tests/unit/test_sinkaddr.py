"""A sink (PostgreSQL, S3) follows the one address rule: global addresses and the pool's allowedCidrs only."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trawl.api.scrapejob import PostgresSink, ScrapeJobSpec
from trawl.egress.addresses import BlockedAddressError, parse_networks
from trawl.egress.sinkaddr import checked_addresses, resolve_sink_host
from trawl.operator.job.sinkcheck import sink_problem
from trawl.sinks.postgres import PgTarget, checked_conninfo

LOOPBACK = parse_networks(["127.0.0.0/8"])


def _infos(*addresses: str) -> list[tuple[object, ...]]:
    return [(0, 0, 0, "", (a, 5432)) for a in addresses]


@pytest.mark.parametrize(
    "address",
    ["169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254", "fe80::1", "10.0.0.5", "172.20.1.1",
     "192.168.1.9", "127.0.0.1", "::1", "fd12::5", "100.64.0.1"],
)  # fmt: skip
def test_private_loopback_link_local_and_cluster_addresses_are_refused_by_default(address: str) -> None:
    with pytest.raises(BlockedAddressError, match=r"^refused: "):
        checked_addresses(address, _infos(address), ())


def test_the_pools_allowed_cidrs_are_the_only_way_to_a_non_global_address() -> None:
    allowed = parse_networks(["10.0.0.0/8", "127.0.0.1/32"])
    assert checked_addresses("db", _infos("10.1.2.3"), allowed) == ["10.1.2.3"]
    assert checked_addresses("db", _infos("127.0.0.1", "127.0.0.1"), allowed) == ["127.0.0.1"]
    assert checked_addresses("db", _infos("8.8.8.8"), ()) == ["8.8.8.8"]  # global: allowed
    with pytest.raises(BlockedAddressError, match=r"refused: db resolves to 127\.0\.0\.2 is in blocked network"):
        checked_addresses("db", _infos("127.0.0.1", "127.0.0.2"), allowed)  # one refused address refuses the name
    with pytest.raises(BlockedAddressError, match=r"169\.254\.169\.254 is in blocked network 169\.254\.0\.0/16"):
        checked_addresses("169.254.169.254", _infos("169.254.169.254"), allowed)


async def test_a_host_is_resolved_and_every_address_checked() -> None:
    assert "127.0.0.1" in await resolve_sink_host("localhost", 5432, LOOPBACK)
    with pytest.raises(BlockedAddressError, match=r"refused: localhost resolves to 127\.0\.0\.1 is in blocked"):
        await resolve_sink_host("localhost", 5432, ())


def test_postgres_connects_to_the_checked_addresses_only_and_never_in_cleartext() -> None:
    t = PgTarget(host="db.example", port=5432, database="d", user="u", password=None, table="t")
    info = t.conninfo(["10.0.0.7", "10.0.0.8"])
    assert "hostaddr=10.0.0.7,10.0.0.8" in info
    assert "host=db.example,db.example" in info  # one host entry per address: libpq pairs them
    assert "require_auth=!password" in info  # libpq refuses a server's cleartext password request
    assert "hostaddr" not in t.conninfo()
    cleartext = PgTarget(host="db", port=5432, database="d", user="u", password="p", table="t", cleartext_password=True)
    assert "require_auth" not in cleartext.conninfo(["10.0.0.7"])


@pytest.mark.parametrize("host", ["/var/run/postgresql", "a.example,b.example", "db example"])
async def test_postgres_socket_directories_and_host_lists_are_refused(host: str) -> None:
    with pytest.raises(ValidationError, match="host must be one host name or IP address"):
        PostgresSink.model_validate({"host": host, "database": "d", "user": "u"})
    # A spec stored before the rule (registered in the queue) is refused where the connection is made.
    t = PgTarget(host=host, port=5432, database="d", user="u", password=None, table="t", allowed=LOOPBACK)
    with pytest.raises(BlockedAddressError, match="refused: host must be one host name or IP address"):
        await checked_conninfo(t)


def _pg_job(host: str) -> ScrapeJobSpec:
    return ScrapeJobSpec.model_validate(
        {
            "pool": "p",
            "urls": ["http://s.test/"],
            "output": {"sink": "PostgreSQL", "postgres": {"host": host, "database": "d", "user": "u"}},
        }
    )


async def test_a_job_whose_postgres_sink_is_a_protected_address_is_stalled_with_the_reason() -> None:
    """Checked before any packet is sent: the job is refused at acceptance, with the reason on its status."""
    problem = await sink_problem("ns", _pg_job("169.254.169.254"), allowed=LOOPBACK)
    assert problem is not None and problem.reason == "SinkUnavailable"
    assert "refused: 169.254.169.254 is in blocked network 169.254.0.0/16" in problem.message
    outside = await sink_problem("ns", _pg_job("127.0.0.2"), allowed=parse_networks(["127.0.0.1/32"]))
    assert outside is not None and "refused: 127.0.0.2 is in blocked network 127.0.0.0/8" in outside.message
