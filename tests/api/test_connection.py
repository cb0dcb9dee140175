"""Errors on time (issue 12): `twofold.open()` against replicas that cannot serve it raises a
typed error naming the address within seconds — a refused token `AuthenticationFailed`, another
storage `StorageMismatch`, anything else `ConnectionFailed` — never a `QueryTimeout` a minute
later; a replica that goes away later fails reads within `connect_timeout`, and serves again
when it is back."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import twofold

from .remote_replica import ThreadReplica

TOKEN = "right-token"


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'shop.db'}"


@pytest.fixture
def replica(url: str) -> Iterator[tuple[ThreadReplica, str]]:
    with ThreadReplica(url, token=TOKEN) as r:
        yield r, r.start()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def opening(url: str, address: str, **kw: object) -> tuple[BaseException, float]:
    start = time.monotonic()
    with pytest.raises(twofold.ConnectionFailed) as info:
        twofold.open(url, replicas=[address], **kw).close()  # type: ignore[arg-type]
    return info.value, time.monotonic() - start


def test_nothing_listening_is_connection_failed_naming_the_address(url: str) -> None:
    address = f"127.0.0.1:{closed_port()}"
    err, took = opening(url, address, connect_timeout=1.0)
    assert type(err) is twofold.ConnectionFailed
    assert address in str(err) and "refused" in str(err).lower()
    assert err.addresses == [address]
    assert took < 15  # connect_timeout plus slack on a loaded machine; the read timeout is 60


def test_an_unknown_host_is_connection_failed_at_once(url: str) -> None:
    err, took = opening(url, "no-such-host.invalid:7000", connect_timeout=30.0)
    assert "no-such-host.invalid:7000" in str(err)
    assert took < 20  # a resolver failure is final: not the 30 s wait


@pytest.mark.parametrize("token", ["wrong-token", None])
def test_a_refused_token_is_authentication_failed_at_once(
    url: str, replica: tuple[ThreadReplica, str], token: str | None
) -> None:
    _, address = replica
    err, took = opening(url, address, token=token, connect_timeout=30.0)
    assert isinstance(err, twofold.AuthenticationFailed)
    assert isinstance(err, twofold.TwofoldError)
    assert address in str(err) and "token" in str(err)
    assert took < 20  # the replica said why: no waiting for the 30 s


def test_a_replica_on_another_storage_is_refused(
    tmp_path: Path, replica: tuple[ThreadReplica, str]
) -> None:
    _, address = replica
    err, _ = opening(f"sqlite:///{tmp_path / 'other.db'}", address, token=TOKEN,
                     connect_timeout=30.0)  # fmt: skip
    assert isinstance(err, twofold.StorageMismatch)
    assert address in str(err) and "storage" in str(err)


def test_a_tls_replica_reached_without_tls_is_connection_failed(url: str, tmp_path: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command line tool is not installed: cannot make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=localhost"],
                   check=True, capture_output=True)  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    with ThreadReplica(url, ssl=context) as r:
        address = r.start()
        err, took = opening(url, address, connect_timeout=30.0)
    assert address in str(err) and "handshake" in str(err)
    assert took < 20


def test_the_same_storage_under_another_url_serves_and_an_outage_fails_reads_on_time(
    url: str, tmp_path: Path, replica: tuple[ThreadReplica, str]
) -> None:
    r, address = replica
    (tmp_path / "sub").mkdir()
    same = f"sqlite:///{tmp_path / 'sub' / '..' / 'shop.db'}"
    with twofold.open(same, replicas=[address], token=TOKEN, connect_timeout=1.0,
                      timeout=60.0, tick_interval=0.01) as db:  # fmt: skip
        t = db.create_table("t", {"x": int})
        t.insert([(1,), (2,)])
        assert sorted(t.collect().rows) == [(1,), (2,)]
        r.stop()
        start = time.monotonic()
        with pytest.raises(twofold.ConnectionFailed, match=address):
            t.collect()
        assert time.monotonic() - start < 20  # connect_timeout plus slack, not the 60 s timeout
        r.start()  # back on the same port: reads work again
        deadline = time.monotonic() + 30
        while True:
            try:
                assert sorted(t.collect().rows) == [(1,), (2,)]
                break
            except twofold.ConnectionFailed:
                assert time.monotonic() < deadline, "the replica never came back"
                time.sleep(0.2)


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command line tool is not installed: cannot make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)  # fmt: skip
    return cert, key


def test_tls_both_ways_serves_and_tls_to_a_plaintext_replica_fails_at_once(
    url: str, tmp_path: Path, replica: tuple[ThreadReplica, str]
) -> None:
    cert, key = _certificate(tmp_path)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    with ThreadReplica(url, ssl=server) as r:
        address = r.start()
        with twofold.open(url, replicas=[address], tls=client, tick_interval=0.01) as db:
            t = db.create_table("t", {"x": int})
            t.insert([(7,)])
            assert t.collect().rows == [(7,)]
    _, plaintext = replica
    err, took = opening(url, plaintext, token=TOKEN, tls=client, connect_timeout=30.0)
    assert plaintext in str(err) and "TLS" in str(err)
    assert took < 20
