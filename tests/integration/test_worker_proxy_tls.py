"""https through an HTTP proxy keeps the guard and the certificate check: the worker resolves the name and
checks the address itself, the proxy gets ``CONNECT <address>:<port>`` (never the name, so it cannot resolve
it again elsewhere), and TLS inside the tunnel is to the name (SNI, and the certificate verified against it).

The fetch runs in a fresh interpreter whose CA store is a test CA (``SSL_CERT_FILE``), as
test_worker_tls.py does; the site is ``localhost`` on 127.0.0.1 with a certificate for the name only."""

from __future__ import annotations

import asyncio
import datetime
import os
import ssl
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from trawl.dev.proxy_servers import TinyProxy

PASSWORD = "tls-Proxy-pw"


def _certificate(
    name: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, signer: ec.EllipticCurvePrivateKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def _ca_and_leaf_for_localhost(tmp: Path) -> tuple[Path, Path, Path]:
    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trawl proxy test CA")])
    ca = (
        _certificate(ca_name, ca_key, ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        _certificate(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]), leaf_key, ca_name, ca_key)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = tmp / "ca.pem", tmp / "leaf.pem", tmp / "leaf.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return paths


@pytest.fixture
async def tls_site(tmp_path: Path) -> AsyncIterator[tuple[int, Path]]:
    ca, leaf, key = _ca_and_leaf_for_localhost(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(leaf, key)

    async def page(_: web.Request) -> web.Response:
        return web.Response(text="<h1>tunnelled</h1>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx).start()
    try:
        yield runner.addresses[0][1], ca
    finally:
        await runner.cleanup()


@pytest.fixture
def tiny() -> Iterator[TinyProxy]:
    with TinyProxy(username="scraper", password=PASSWORD) as proxy:
        yield proxy


_PROBE = """
import asyncio, sys
from trawl.worker.fetch import Fetcher, FetchError
from trawl.worker.proxies import parse_proxy_list
from trawl.egress.addresses import parse_networks

async def main(url, proxy, allowed):
    (endpoint,) = parse_proxy_list(proxy)
    async with Fetcher(allowed=parse_networks(allowed)) as fetcher:
        try:
            result = await fetcher.fetch(url, proxy=endpoint)
        except FetchError as exc:
            print("error", exc.failure_class.value, exc)
        else:
            print("fetched", result.status, result.body.decode())

asyncio.run(main(*ARGS))
"""


async def _probe(url: str, proxy: str, allowed: list[str], ca: Path) -> str:
    env = dict(os.environ, SSL_CERT_FILE=str(ca), SSL_CERT_DIR=str(ca.parent / "no-such-dir"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PROBE.replace("ARGS", repr((url, proxy, allowed))),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()
    return out.decode().strip()


async def test_https_goes_to_the_checked_address_and_tls_to_the_name(
    tls_site: tuple[int, Path], tiny: TinyProxy
) -> None:
    port, ca = tls_site
    line = await _probe(f"https://localhost:{port}/", tiny.url("scraper", PASSWORD), ["127.0.0.1/32"], ca)
    assert line == "fetched 200 <h1>tunnelled</h1>", line
    requests = [entry for entry in tiny.log().splitlines() if "Request (file descriptor" in entry]
    assert len(requests) == 1 and f"CONNECT 127.0.0.1:{port}" in requests[0], tiny.log()
    assert "localhost" not in tiny.log()  # the proxy never saw the name


async def test_https_to_a_blocked_name_never_reaches_the_proxy(tls_site: tuple[int, Path], tiny: TinyProxy) -> None:
    port, ca = tls_site
    line = await _probe(f"https://localhost:{port}/", tiny.url("scraper", PASSWORD), [], ca)
    assert line.startswith("error BlockedAddress"), line
    assert "Request (file descriptor" not in tiny.log() and PASSWORD not in line
