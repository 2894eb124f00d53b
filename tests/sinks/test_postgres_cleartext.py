"""A PostgreSQL sink never sends the pool's password in cleartext unless the pool allows it (issue 32: libpq
answers a server's cleartext-password request, so a job pointing its sink at a server of its choosing
read the password): against a server that asks for it (a stand-in speaking just enough of the protocol)
and a real PostgreSQL whose pg_hba says ``password``."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from trawl.dev.postgres_server import PostgresServer
from trawl.egress.addresses import parse_networks
from trawl.sinks.postgres import PgTarget, ensure_table
from waits import wait_for

LOOPBACK = parse_networks(["127.0.0.0/8"])
PASSWORD = "platform-db-password"


class CleartextAsker:
    """Accepts, reads the start-up packet, asks for the password in cleartext (AuthenticationCleartextPassword)
    and records what the client answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.answers: list[bytes] = []
        self.connections = 0

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def serve(self) -> None:
        while True:
            try:
                conn, _peer = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.settimeout(10)
                with contextlib.suppress(OSError):
                    self._session(conn)

    def _session(self, conn: socket.socket) -> None:
        while True:
            length, code = struct.unpack("!ii", _read(conn, 8))
            _read(conn, length - 8)
            if code in (80877103, 80877104):  # SSLRequest, GSSENCRequest: not here
                conn.sendall(b"N")
                continue
            break
        conn.sendall(b"R" + struct.pack("!ii", 8, 3))  # AuthenticationCleartextPassword
        kind = conn.recv(1)
        if kind:
            (length,) = struct.unpack("!i", _read(conn, 4))
            self.answers.append(kind + _read(conn, length - 4))


def _read(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


@pytest.fixture
def asker() -> Iterator[CleartextAsker]:
    server = CleartextAsker()
    threading.Thread(target=server.serve, daemon=True).start()
    try:
        yield server
    finally:
        server.sock.close()


async def test_a_server_asking_for_the_password_in_cleartext_never_gets_it(asker: CleartextAsker) -> None:
    target = PgTarget(
        host="127.0.0.1",
        port=asker.port,
        database="d",
        user="u",
        password=PASSWORD,
        table="t",
        ssl_mode="disable",
        connect_timeout=5,
        allowed=LOOPBACK,
    )
    with pytest.raises(psycopg.OperationalError, match="server requested a cleartext password"):
        await ensure_table(target)
    assert asker.connections >= 1
    assert not any(PASSWORD.encode() in answer for answer in asker.answers), asker.answers


def _password_auth_role(pg_server: PostgresServer) -> tuple[str, str]:
    """A role the server authenticates with the cleartext ``password`` method (pg_hba), in force."""
    role, secret = "clear_" + uuid.uuid4().hex[:8], uuid.uuid4().hex
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{secret}'")
        conn.execute(f'GRANT CREATE ON DATABASE "{pg_server.database}" TO {role}')
        hba = Path(str(conn.execute("SHOW hba_file").fetchone()[0]))  # type: ignore[index]
        hba.write_text(f"host all {role} 127.0.0.1/32 password\n" + hba.read_text())
        conn.execute("SELECT pg_reload_conf()")
    cleartext_only = (
        f"host=127.0.0.1 port={pg_server.port} dbname={pg_server.database} user={role} password={secret} "
        "sslmode=disable require_auth=password"
    )

    def reloaded() -> bool:
        with psycopg.connect(cleartext_only):
            return True

    wait_for("pg_hba's password method in force", reloaded, retry_on=(psycopg.OperationalError,))
    return role, secret


async def test_a_real_server_with_password_auth_needs_the_pools_consent(pg_server: PostgresServer) -> None:
    role, secret = _password_auth_role(pg_server)
    target = PgTarget(
        host="127.0.0.1",
        port=pg_server.port,
        database=pg_server.database,
        user=role,
        password=secret,
        table=f"{role}.t",
        ssl_mode="disable",
        connect_timeout=5,
        allowed=LOOPBACK,
    )
    with pytest.raises(psycopg.OperationalError, match="server requested a cleartext password"):
        await ensure_table(target)
    await ensure_table(replace(target, cleartext_password=True))  # the pool allows it
