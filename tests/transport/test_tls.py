"""TLS through the standard library's `ssl`, with a self-signed certificate made by `openssl`."""

from __future__ import annotations

import logging
import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from twofold.protocol import PeekResponse, PeekRows
from twofold.transport import ConnectFailed, HandshakeFailed, ReplicaServer, TlsFailed, connect

from .support import EchoReplica, async_test, hello, peek, within

TOKEN = "tls-token"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command line tool is not installed: cannot make a certificate")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def _server_context(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


def _client_context(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificate[0]))


async def _round_trip(server: ReplicaServer, context: ssl.SSLContext, n: int) -> None:
    async with await connect(*server.address, token=TOKEN, ssl=context) as client:
        await client.send(hello())
        for i in range(n):
            await client.send(peek(i))
        for i in range(n):
            assert await within(client.recv()) == PeekResponse(peek(i).uuid, PeekRows([([i], 1)]))


@async_test
async def test_round_trip_over_tls(certificate: tuple[Path, Path]) -> None:
    replica = EchoReplica()
    async with ReplicaServer(replica, token=TOKEN, ssl=_server_context(certificate)) as server:
        await _round_trip(server, _client_context(certificate), 200)
        # A second connection over TLS supersedes the first and works the same.
        await _round_trip(server, _client_context(certificate), 3)
    assert len(replica.commands) == 1 + 200 + 1 + 3


@async_test
async def test_a_plaintext_client_against_a_tls_server_fails_cleanly(
    certificate: tuple[Path, Path],
) -> None:
    replica = EchoReplica()
    async with ReplicaServer(replica, token=TOKEN, ssl=_server_context(certificate)) as server:
        with pytest.raises(HandshakeFailed):
            await connect(*server.address, token=TOKEN, timeout=5)
        await _round_trip(server, _client_context(certificate), 1)
    assert len(replica.commands) == 2


@async_test
async def test_a_tls_client_against_a_plaintext_server_fails_cleanly(
    certificate: tuple[Path, Path],
) -> None:
    async with ReplicaServer(EchoReplica()) as server:
        with pytest.raises(TlsFailed, match="TLS handshake failed"):  # final, not "retry"
            await connect(*server.address, ssl=_client_context(certificate), timeout=5)
        async with await connect(*server.address) as client:
            await client.send(hello())


@async_test
async def test_an_untrusted_certificate_is_refused(certificate: tuple[Path, Path]) -> None:
    async with ReplicaServer(EchoReplica(), ssl=_server_context(certificate)) as server:
        with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
            await connect(*server.address, ssl=ssl.create_default_context(), timeout=5)


@async_test
async def test_a_plaintext_replica_says_a_tls_client_reached_it(
    certificate: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="twofold.transport")
    async with ReplicaServer(EchoReplica()) as server:
        with pytest.raises(TlsFailed):
            await connect(*server.address, ssl=_client_context(certificate), timeout=5)
    assert "a TLS client, but this replica serves plaintext" in caplog.text
