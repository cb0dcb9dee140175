"""Authentication exchanges: trust, cleartext password, md5 and SCRAM-SHA-256.

Contract: `Authenticator(method, passwords)` is sans-IO: `start(user)` gives the first backend
message; `step(data)` takes a PasswordMessage/SASL body and returns `(reply, done)`; a wrong
password or unknown user raises `AuthFailed` (28P01), an unsupported mechanism `AuthFailed`
too. Passwords come from a file of `user:password` lines (`load_passwords`).
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

from twofold.server.messages import encode_auth

METHODS = ("trust", "password", "md5", "scram-sha-256")


class AuthFailed(Exception):
    def __init__(self, message: str, code: str = "28P01") -> None:
        super().__init__(message)
        self.code = code


def load_passwords(path: str | Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user:
            raise ValueError(f"{path}:{lineno}: expected 'user:password'")
        out[user.strip()] = password.rstrip("\n")
    return out


class Authenticator:
    def __init__(self, method: str, passwords: dict[str, str]) -> None:
        if method not in METHODS:
            raise ValueError(f"unknown auth method {method!r}; choose from {', '.join(METHODS)}")
        self.method = method
        self.passwords = passwords
        self.user = ""
        self._salt = b""
        self._scram: object | None = None

    def _failed(self) -> AuthFailed:
        return AuthFailed(f"password authentication failed for user \"{self.user}\"")

    def start(self, user: str) -> tuple[bytes, bool]:
        self.user = user
        if self.method == "trust":
            return encode_auth(0), True
        if self.method == "password":
            return encode_auth(3), False
        if self.method == "md5":
            self._salt = os.urandom(4)
            return encode_auth(5, self._salt), False
        return encode_auth(10, b"SCRAM-SHA-256\0\0"), False

    def step(self, data: bytes) -> tuple[bytes, bool]:
        expected = self.passwords.get(self.user)
        if self.method in ("password", "md5"):
            given = data.rstrip(b"\0").decode("utf-8", "replace")
            if expected is None:
                raise self._failed()
            if self.method == "password":
                ok = given == expected
            else:
                inner = hashlib.md5((expected + self.user).encode()).hexdigest()
                ok = given == "md5" + hashlib.md5(inner.encode() + self._salt).hexdigest()
            if not ok:
                raise self._failed()
            return encode_auth(0), True
        return self._scram_step(data, expected)

    def _scram_step(self, data: bytes, expected: str | None) -> tuple[bytes, bool]:
        from scramp import ScramException, ScramMechanism

        try:
            if self._scram is None:
                end = data.find(b"\0")
                mech = data[:end].decode()
                if mech != "SCRAM-SHA-256":
                    raise AuthFailed(f"SASL mechanism {mech!r} is not supported", "28000")
                (n,) = struct.unpack_from("!i", data, end + 1)
                first = data[end + 5:end + 5 + n].decode()
                mechanism = ScramMechanism("SCRAM-SHA-256")
                info = mechanism.make_auth_info(expected or os.urandom(16).hex())
                server = mechanism.make_server(lambda _user: info)
                server.set_client_first(first)
                self._scram = server
                return encode_auth(11, server.get_server_first().encode()), False
            server = self._scram
            server.set_client_final(data.decode())  # type: ignore[attr-defined]
            if expected is None:
                raise self._failed()
            final = server.get_server_final().encode()  # type: ignore[attr-defined]
            return encode_auth(12, final) + encode_auth(0), True
        except ScramException:
            raise self._failed() from None
