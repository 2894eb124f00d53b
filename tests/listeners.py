"""A listening socket that records every connection made to it: the stand-in for a protected address (a
cluster service, the node, the metadata service) that issue 32's tests prove nothing reaches."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field


@dataclass
class Connection:
    peer: tuple[str, int]
    first_bytes: bytes = b""
    closed_by_peer: bool = False


@dataclass
class ConnectionRecorder:
    """Accepts on ``host`` (a free port), records each connection and what it sent first, answers
    ``reply`` (nothing by default: a black hole that keeps the connection open until the peer closes)."""

    host: str = "127.0.0.2"
    reply: bytes = b""
    connections: list[Connection] = field(default_factory=list)
    _sock: socket.socket | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        assert self._sock is not None
        return int(self._sock.getsockname()[1])

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def count(self) -> int:
        with self._lock:
            return len(self.connections)

    def all_closed(self) -> bool:
        with self._lock:
            return all(c.closed_by_peer for c in self.connections)

    def __enter__(self) -> ConnectionRecorder:
        self._sock = socket.create_server((self.host, 0))
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sock is not None:
            self._sock.close()

    def _accept(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, peer = self._sock.accept()
            except OSError:
                return
            record = Connection(peer=peer)
            with self._lock:
                self.connections.append(record)
            threading.Thread(target=self._serve, args=(conn, record), daemon=True).start()

    def _serve(self, conn: socket.socket, record: Connection) -> None:
        with conn:
            conn.settimeout(120)
            try:
                record.first_bytes = conn.recv(4096)
                if self.reply:
                    conn.sendall(self.reply)
                while conn.recv(4096):
                    pass
            except OSError:
                return
            record.closed_by_peer = True
