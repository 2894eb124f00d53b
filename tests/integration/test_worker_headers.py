"""A job's request headers reach the job's own origins only (trawl.jobspec.headerscope), through the real worker:
not an http page a crawl finds on its https host, not a job author's own server when the pool's credential is for
another site.

Real worker in this process, real queue and Redis; the sites on loopback: the bookstore (its /hostile/headers
echoes what reached it) and, for the downgrade, one port of 127.0.0.2 that speaks TLS and plain HTTP both, so
https://127.0.0.2:P and http://127.0.0.2:P are one host to a SameHost crawl, as https://h and http://h are.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import ssl
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp.connector
import pytest
import redis.asyncio as aioredis
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.dev.bookstore import Bookstore
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.worker.runner import Worker, WorkerConfig
from worker_runs import run_to_end

PREFIX = "trawl:{test/headers}"
HOST = "127.0.0.2"
SECRET = {"Authorization": "Bearer s3cret", "Cookie": "session=s3cret"}


async def _crawl(redis: aioredis.Redis, job: dict[str, Any], pool: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run one job to its end on a worker in this process; its records by URL."""
    spec = ScrapeJobSpec.model_validate({"pool": "p", "politeness": {"requestsPerSecond": 1000}, **job})
    pool_spec = ScrapePoolSpec.model_validate({"redis": {"url": "redis://unused"}, **(pool or {})})
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, spec, pool_spec))
    await queue.enqueue(job_id, spec.seed_urls())
    await queue.mark_enqueue_done(job_id)
    config = WorkerConfig(prefix=PREFIX, worker_id="w-" + job_id, concurrency=4, allowed_cidrs=[f"{HOST}/32"])
    worker = Worker(config, queue, redis, Keys(PREFIX))
    await run_to_end(worker, queue, job_id, 60, 30)
    stats = await queue.job_stats(job_id)
    assert stats.dead == 0, await queue.dead_letters(job_id)
    entries = await redis.xrange(Keys(PREFIX).results(job_id))
    records = [json.loads(fields[b"data"]) for _id, fields in entries]
    return {r["url"]: r for r in records}


def _echoed(record: dict[str, Any]) -> dict[str, str]:
    """The request headers an echo page reported (its text is their JSON)."""
    got: dict[str, str] = json.loads(record["text"])
    return got


def _ca_and_leaf(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate for HOST it signed: ca.pem, leaf.pem, leaf.key."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trawl headers test CA")])

    def build(subject: x509.Name, key: Any) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    ca = (
        build(ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        build(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)]), leaf_key)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST))]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = tmp / "ca.pem", tmp / "leaf.pem", tmp / "leaf.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_pem = leaf_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    paths[2].write_bytes(key_pem)
    return paths


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(Exception):
        writer.close()


@pytest.fixture
async def both_schemes(tmp_path: Path) -> AsyncIterator[str]:
    """One port of HOST serving https (a TLS handshake's first byte is 0x16) and http: its port. The home
    page links the echo page over both schemes; /echo answers with the request headers as JSON."""
    ca, leaf, key = _ca_and_leaf(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(leaf, key)
    # The fetcher verifies certificates against aiohttp's default context: trust the test CA in this process.
    aiohttp.connector._SSL_CONTEXT_VERIFIED.load_verify_locations(ca)  # type: ignore[attr-defined]
    port_box: list[int] = []

    async def home(_: web.Request) -> web.Response:
        port = port_box[0]
        links = f'<a href="https://{HOST}:{port}/echo">tls</a> <a href="http://{HOST}:{port}/echo">plain</a>'
        return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")

    async def echo(request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(dict(request.headers)), content_type="text/html")

    async def robots(_: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.router.add_get("/", home)
    app.router.add_get("/echo", echo)
    app.router.add_get("/robots.txt", robots)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    backends = [web.TCPSite(runner, HOST, 0, ssl_context=tls), web.TCPSite(runner, HOST, 0)]
    for backend in backends:
        await backend.start()
    tls_port, plain_port = (b._server.sockets[0].getsockname()[1] for b in backends)  # type: ignore[union-attr]

    async def front(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.read(1)
        if not first:
            writer.close()
            return
        back_reader, back_writer = await asyncio.open_connection(HOST, tls_port if first == b"\x16" else plain_port)
        back_writer.write(first)
        await asyncio.gather(_pipe(reader, back_writer), _pipe(back_reader, writer))

    server = await asyncio.start_server(front, HOST, 0)
    port_box.append(server.sockets[0].getsockname()[1])
    try:
        yield str(port_box[0])
    finally:
        server.close()
        await runner.cleanup()


async def test_a_crawl_from_https_sends_no_headers_to_http_on_the_same_host(
    both_schemes: str, redis_client: aioredis.Redis
) -> None:
    base = f"https://{HOST}:{both_schemes}"
    job = {
        "urls": [base + "/"],
        "crawl": {"maxDepth": 1, "scope": "SameHost"},
        "request": {"headers": SECRET},
        "extract": {"text": True},
    }
    records = await _crawl(redis_client, job)
    tls, plain = records[base + "/echo"], records[f"http://{HOST}:{both_schemes}/echo"]
    assert {k: _echoed(tls).get(k) for k in SECRET} == SECRET  # the job's own origin gets them
    assert not set(SECRET) & set(_echoed(plain)), _echoed(plain)  # the downgrade gets none


async def test_a_pool_credential_never_reaches_a_job_authors_own_server(
    site: Bookstore, redis_client: aioredis.Redis
) -> None:
    with Bookstore(host=HOST, categories=1, books_per_category=1) as partner:
        pool = {
            "defaults": {
                "request": {
                    "headers": {"X-Api-Key": "pool-key", "Accept-Language": "de"},
                    "headerOrigins": [partner.url],
                }
            }
        }
        own, theirs = site.url + "/hostile/headers", partner.url + "/hostile/headers"
        records = await _crawl(redis_client, {"urls": [own, theirs], "extract": {"text": True}}, pool)
    to_author, to_partner = _echoed(records[own]), _echoed(records[theirs])
    assert "X-Api-Key" not in to_author and to_author["Accept-Language"] == "de"  # the job author's server
    assert to_partner["X-Api-Key"] == "pool-key"  # the site the pool's key is for
