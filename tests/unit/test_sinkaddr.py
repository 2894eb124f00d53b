"""A sink (PostgreSQL, S3) never connects to a link-local address: the cloud metadata services."""

from __future__ import annotations

import pytest

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.egress.addresses import BlockedAddressError
from trawl.egress.sinkaddr import resolve_sink_host, sink_block_reason
from trawl.operator.job.sinkcheck import sink_problem
from trawl.sinks.postgres import PgTarget, checked_conninfo


@pytest.mark.parametrize(
    "address",
    ["169.254.169.254", "169.254.0.1", "::ffff:169.254.169.254", "fd00:ec2::254", "fe80::1", "fe80::1%eth0"],
)
def test_link_local_and_metadata_addresses_are_refused(address: str) -> None:
    reason = sink_block_reason(address)
    assert reason is not None and "link-local" in reason


@pytest.mark.parametrize("address", ["10.0.0.5", "172.20.1.1", "192.168.1.9", "127.0.0.1", "::1", "fd12::5", "8.8.8.8"])
def test_private_loopback_and_public_addresses_are_allowed(address: str) -> None:
    # In-cluster databases live on private addresses, proxy sidecars on loopback.
    assert sink_block_reason(address) is None


async def test_a_host_is_resolved_and_every_address_checked() -> None:
    assert "127.0.0.1" in await resolve_sink_host("localhost", 5432)
    with pytest.raises(BlockedAddressError, match=r"refused: 169\.254\.169\.254 is in 169\.254\.0\.0/16"):
        await resolve_sink_host("169.254.169.254", 80)


def test_postgres_connects_to_the_checked_addresses_only() -> None:
    t = PgTarget(host="db.example", port=5432, database="d", user="u", password=None, table="t")
    info = t.conninfo(["10.0.0.7", "10.0.0.8"])
    assert "hostaddr=10.0.0.7,10.0.0.8" in info
    assert "host=db.example,db.example" in info  # one host entry per address: libpq pairs them
    assert "hostaddr" not in t.conninfo()


async def test_postgres_socket_directories_and_host_lists_pass_through() -> None:
    for host in ("/var/run/postgresql", "a.example,b.example"):
        t = PgTarget(host=host, port=5432, database="d", user="u", password=None, table="t")
        assert await checked_conninfo(t) == t.conninfo()


async def test_a_job_whose_postgres_sink_is_the_metadata_service_is_stalled_with_the_reason() -> None:
    """Checked before any packet is sent: the job is refused at acceptance, with the reason on its status."""
    spec = ScrapeJobSpec.model_validate(
        {
            "pool": "p",
            "urls": ["http://s.test/"],
            "output": {"sink": "PostgreSQL", "postgres": {"host": "169.254.169.254", "database": "d", "user": "u"}},
        }
    )
    problem = await sink_problem("ns", spec)
    assert problem is not None and problem.reason == "SinkUnavailable"
    assert "refused: 169.254.169.254 is in 169.254.0.0/16, link-local (cloud metadata)" in problem.message
