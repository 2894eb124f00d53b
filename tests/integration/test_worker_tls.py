"""A starting worker loads the CA store on a thread (trawl.boot.castore), and still verifies every certificate.

Each check runs in a fresh interpreter started the way ``trawl worker`` starts (``trawl.cli`` with the
worker's argv), against a real TLS server on loopback whose certificate a test CA signs. The system CA
store is replaced by that CA through ``SSL_CERT_FILE`` (OpenSSL's own variable, honoured by
``set_default_verify_paths``), so a verified fetch succeeds only if the deferred load really ran.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _write_ca_and_leaf(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA (ca.pem) and a certificate for 127.0.0.1 it signed (leaf.pem, leaf.key)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trawl test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
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
async def tls_site(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """An HTTPS server on 127.0.0.1 (free port) and the CA that signed its certificate."""
    ca, leaf, key = _write_ca_and_leaf(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(leaf, key)

    async def page(_: web.Request) -> web.Response:
        return web.Response(text="<h1>over TLS</h1>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"https://127.0.0.1:{port}/", ca
    finally:
        await runner.cleanup()


# What a worker process does: trawl.cli's worker start-up (which defers the CA loads), then a fetch
# through the worker's Fetcher. Prints whether the load was deferred (a one-certificate store loads in
# microseconds, so its count right after the import says nothing), the fetch's outcome, and the CA count
# of aiohttp's verified context afterwards.
_PROBE = """
import asyncio, sys
sys.argv = ["trawl", "worker"]
import trawl.cli
import aiohttp.connector
from trawl.worker.fetch import Fetcher, FetchError
from trawl.egress.addresses import parse_networks

import trawl.boot.castore
print("deferred", trawl.boot.castore._loaded is not None)

async def main():
    async with Fetcher(allowed=parse_networks(["127.0.0.1/32"])) as fetcher:
        try:
            result = await fetcher.fetch(sys.argv_url)
        except FetchError as exc:
            print("error", exc.failure_class.value, exc)
        else:
            print("fetched", result.status, result.body.decode())
    print("cas-after", aiohttp.connector._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"])
    print("unverified-cas", aiohttp.connector._SSL_CONTEXT_UNVERIFIED.cert_store_stats()["x509_ca"])

sys.argv_url = URL
asyncio.run(main())
"""


async def _probe(url: str, cert_file: Path) -> list[str]:
    env = dict(os.environ, SSL_CERT_FILE=str(cert_file), SSL_CERT_DIR=str(cert_file.parent / "no-such-dir"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PROBE.replace("URL", repr(url)),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()
    return out.decode().splitlines()


async def test_a_starting_worker_defers_the_ca_load_and_verifies_with_it(tls_site: tuple[str, Path]) -> None:
    url, ca = tls_site
    lines = await _probe(url, ca)
    # Deferred to the thread, and the test CA (only it) loaded before the fetch verified the server.
    assert lines[0] == "deferred True", lines
    assert lines[1] == "fetched 200 <h1>over TLS</h1>", lines
    assert lines[2] == "cas-after 1", lines
    # aiohttp's context for ssl=False verifies nothing (CERT_NONE): its store is not loaded at all.
    assert lines[3] == "unverified-cas 0", lines


async def test_a_certificate_the_ca_store_does_not_trust_is_refused(tls_site: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = tls_site
    (tmp_path / "other").mkdir()
    other_ca, _, _ = _write_ca_and_leaf(tmp_path / "other")
    lines = await _probe(url, other_ca)
    # Verification fails closed: the deferred store holds a different CA, so the handshake is refused,
    # as a connection failure (retried, then dead-lettered) with OpenSSL's reason in the message.
    assert lines[0] == "deferred True", lines
    assert lines[1].startswith("error Connection "), lines
    assert "certificate verify failed" in lines[1], lines
    assert lines[2] == "cas-after 1", lines
