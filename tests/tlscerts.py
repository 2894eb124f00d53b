"""A CA and a serving certificate signed by it, for tests that serve TLS (the results API, its console, the
aggregated API on the real node)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path
from typing import Any


def issue_tls(
    folder: Path, ips: tuple[str, ...] = ("127.0.0.1",), names: tuple[str, ...] = ()
) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for ``ips`` and ``names`` signed by it: (ca.pem, tls.crt, tls.key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def cert(name: str, key: Any, issuer: x509.Name, signer: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            alt: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
            san = x509.SubjectAlternativeName(alt + [x509.DNSName(n) for n in names])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test results API CA")])
    ca_cert = cert("test results API CA", ca_key, ca_name, ca_key, True)
    leaf = cert("trawl-operator-api", key, ca_name, ca_key, False)
    paths = folder / "ca.pem", folder / "tls.crt", folder / "tls.key"
    paths[0].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    paths[2].write_bytes(key_pem)
    return paths
