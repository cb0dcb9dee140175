"""Authentication exchanges: trust, cleartext password, md5 and SCRAM-SHA-256 (RFC 7677, no
channel binding).

Contract: `Authenticator(method, passwords)` is sans-IO: `start(user)` gives the first backend
message; `step(data)` takes a PasswordMessage/SASL body and returns `(reply, done)`; a wrong
password or unknown user raises `AuthFailed` (28P01), an unsupported mechanism `AuthFailed`
too. Passwords come from a file of `user:password` lines (`load_passwords`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct
from pathlib import Path

from twofold.server.messages import encode_auth

_ITERATIONS = 4096
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
        self._scram: tuple[str, str, str, str, bytes] | None = None

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
        """SCRAM-SHA-256 (RFC 5802/7677) without channel binding, as PostgreSQL does it."""
        try:
            if self._scram is None:
                end = data.index(b"\0")
                mech = data[:end].decode()
                if mech != "SCRAM-SHA-256":
                    raise AuthFailed(f"SASL mechanism {mech!r} is not supported", "28000")
                (n,) = struct.unpack_from("!i", data, end + 1)
                first = data[end + 5:end + 5 + n].decode()
                gs2, _, rest = first.partition(",")
                authzid, _, bare = rest.partition(",")
                if gs2 not in ("n", "y") or authzid:
                    raise AuthFailed("SCRAM channel binding is not supported", "28000")
                attrs = dict(a.split("=", 1) for a in bare.split(","))
                nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode()
                salt = os.urandom(16)
                server_first = f"r={nonce},s={base64.b64encode(salt).decode()},i={_ITERATIONS}"
                self._scram = (f"{gs2},{authzid},", bare, server_first, nonce, salt)
                return encode_auth(11, server_first.encode()), False
            header, bare, server_first, nonce, salt = self._scram
            final = data.decode()
            without_proof, _, proof_attr = final.rpartition(",p=")
            attrs = dict(a.split("=", 1) for a in without_proof.split(","))
            if attrs.get("r") != nonce or base64.b64decode(attrs.get("c", "")) != \
                    header.encode():
                raise self._failed()
            if expected is None:
                raise self._failed()
            salted = hashlib.pbkdf2_hmac("sha256", expected.encode(), salt, _ITERATIONS)
            client_key = hmac.digest(salted, b"Client Key", "sha256")
            stored_key = hashlib.sha256(client_key).digest()
            auth_message = f"{bare},{server_first},{without_proof}".encode()
            signature = hmac.digest(stored_key, auth_message, "sha256")
            proof = base64.b64decode(proof_attr)
            recovered = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
            if not hmac.compare_digest(hashlib.sha256(recovered).digest(), stored_key):
                raise self._failed()
            server_key = hmac.digest(salted, b"Server Key", "sha256")
            verifier = base64.b64encode(hmac.digest(server_key, auth_message, "sha256"))
            return encode_auth(12, b"v=" + verifier) + encode_auth(0), True
        except (ValueError, KeyError, UnicodeDecodeError, struct.error):
            raise self._failed() from None
