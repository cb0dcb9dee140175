"""A raw pgwire client for robustness tests: build frontend messages, read backend ones."""

from __future__ import annotations

import socket
import struct


def msg(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def startup(user: str = "twofold", database: str = "twofold") -> bytes:
    body = struct.pack("!i", 196608) + b"user\0" + user.encode() + b"\0database\0" + \
        database.encode() + b"\0\0"
    return struct.pack("!i", len(body) + 4) + body


def query(sql: str) -> bytes:
    return msg(b"Q", sql.encode() + b"\0")


class Raw:
    def __init__(self, host: str, port: int, timeout: float = 10) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_message(self) -> tuple[bytes, bytes] | None:
        """The next backend message, or None at end of stream."""
        while True:
            if len(self.buf) >= 5:
                (n,) = struct.unpack_from("!i", self.buf, 1)
                if len(self.buf) >= n + 1:
                    kind, body = self.buf[:1], self.buf[5:n + 1]
                    self.buf = self.buf[n + 1:]
                    return kind, body
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data

    def until(self, kind: bytes) -> list[tuple[bytes, bytes]]:
        seen = []
        while True:
            m = self.read_message()
            if m is None:
                raise EOFError(f"closed before {kind!r}; got {[k for k, _ in seen]}")
            seen.append(m)
            if m[0] == kind:
                return seen

    def login(self) -> None:
        self.send(startup())
        self.until(b"Z")

    def read_to_eof(self) -> list[tuple[bytes, bytes]]:
        out = []
        while (m := self.read_message()) is not None:
            out.append(m)
        return out

    def close(self) -> None:
        self.sock.close()
