"""Authentication: cleartext password, md5 and SCRAM-SHA-256 against a password file's users;
a wrong password or unknown user is 28P01; TLS when the server has a certificate."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import pytest

from twofold.server.auth import load_passwords
from twofold.testing.pgwire import running_server

USERS = {"alice": "s3cret", "bob": "other"}


@pytest.mark.parametrize("method", ["password", "md5", "scram-sha-256"])
def test_password_methods(method: str) -> None:
    with running_server(auth=method, passwords=USERS) as server:
        with psycopg.connect(server.dsn("alice", password="s3cret"), autocommit=True) as c:
            assert c.execute("SELECT current_user").fetchone() == ("alice",)
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(server.dsn("alice", password="wrong"))
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(server.dsn("mallory", password="s3cret"))


def test_password_file(tmp_path: Path) -> None:
    f = tmp_path / "pw"
    f.write_text("# users\nalice:s3cret\nbob:a:b\n")
    assert load_passwords(f) == {"alice": "s3cret", "bob": "a:b"}
    f.write_text("nocolon\n")
    with pytest.raises(ValueError, match="user:password"):
        load_passwords(f)


def test_tls(tmp_path: Path) -> None:
    import ssl

    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    done = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                           str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
                          capture_output=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"openssl could not make a certificate: {done.stderr[:200]!r}")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    with running_server(tls=context) as server, \
            psycopg.connect(server.dsn(sslmode="require"), autocommit=True) as c:
        assert c.pgconn.ssl_in_use
        assert c.execute("SELECT 1").fetchone() == (1,)
    with running_server() as server:  # no certificate: SSLRequest is answered 'N'
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.dsn(sslmode="require"))
        with psycopg.connect(server.dsn(sslmode="prefer"), autocommit=True) as c:
            assert not c.pgconn.ssl_in_use
