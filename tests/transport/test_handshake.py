"""The sans-IO handshake: token decisions, version and magic checks, client-side errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twofold.transport import (
    AuthenticationFailed,
    HandshakeFailed,
    StorageMismatch,
    VersionMismatch,
)
from twofold.transport.handshake import (
    MAGIC,
    PROTOCOL_VERSION,
    Authenticator,
    HelloStatus,
    Verdict,
    client_hello,
    parse_server_hello,
    raise_for,
    server_hello,
)

tokens = st.one_of(st.binary(min_size=1, max_size=64), st.text(min_size=1, max_size=32))


def _as_bytes(token: str | bytes) -> bytes:
    return token.encode() if isinstance(token, str) else token


@given(expected=tokens, sent=tokens)
def test_a_token_is_accepted_iff_it_equals_the_configured_one(
    expected: str | bytes, sent: str | bytes
) -> None:
    verdict = Authenticator(expected).judge(client_hello(sent))
    assert verdict.ok == (_as_bytes(sent) == _as_bytes(expected))
    if not verdict.ok:
        assert verdict.status is HelloStatus.AUTHENTICATION_FAILED


@given(expected=tokens)
def test_near_misses_are_refused(expected: str | bytes) -> None:
    token = _as_bytes(expected)
    auth = Authenticator(token)
    assert auth.judge(client_hello(token)).ok
    near = [token + b"x", token[:-1] or b"\x00\x00", token[:-1] + bytes([token[-1] ^ 1])]
    for candidate in near:
        if candidate != token:
            assert auth.judge(client_hello(candidate)).status is HelloStatus.AUTHENTICATION_FAILED


def test_missing_token_is_refused_when_one_is_required() -> None:
    verdict = Authenticator("secret").judge(client_hello(None))
    assert verdict.status is HelloStatus.AUTHENTICATION_FAILED
    assert "required" in verdict.reason


def test_without_a_configured_token_any_client_is_accepted() -> None:
    auth = Authenticator(None)
    assert not auth.requires_token
    assert auth.judge(client_hello(None)).ok
    assert auth.judge(client_hello("whatever")).ok


def test_empty_token_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="empty token"):
        Authenticator("")
    with pytest.raises(ValueError, match="empty token"):
        client_hello(b"")


def test_version_mismatch_is_detected_even_without_a_token() -> None:
    verdict = Authenticator(None).judge(client_hello(None, version=PROTOCOL_VERSION + 1))
    assert verdict.status is HelloStatus.VERSION_MISMATCH
    assert str(PROTOCOL_VERSION + 1) in verdict.reason


@pytest.mark.parametrize("payload", [b"", b"GET / HTTP/1.1\r\n", MAGIC[:-1], b"x" * 100])
def test_non_twofold_hello_is_malformed(payload: bytes) -> None:
    assert Authenticator("t").judge(payload).status is HelloStatus.MALFORMED


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (HelloStatus.AUTHENTICATION_FAILED, AuthenticationFailed),
        (HelloStatus.VERSION_MISMATCH, VersionMismatch),
        (HelloStatus.MALFORMED, HandshakeFailed),
    ],
)
def test_server_refusals_map_to_typed_errors(status: HelloStatus, error: type[Exception]) -> None:
    verdict = parse_server_hello(server_hello(Verdict(status, "because")))
    assert verdict.status is status
    with pytest.raises(error, match="because"):
        raise_for(verdict)


def test_ok_server_hello_round_trips() -> None:
    verdict = parse_server_hello(server_hello(Verdict(HelloStatus.OK)))
    assert verdict.ok
    raise_for(verdict)


@pytest.mark.parametrize("payload", [b"", b"HTTP/1.1 200 OK", MAGIC + b"\x00\x01"])
def test_client_rejects_a_reply_that_is_not_a_server_hello(payload: bytes) -> None:
    with pytest.raises(HandshakeFailed):
        parse_server_hello(payload)


def test_client_rejects_an_unknown_status() -> None:
    with pytest.raises(HandshakeFailed, match="unknown status 77"):
        parse_server_hello(MAGIC + PROTOCOL_VERSION.to_bytes(2, "big") + bytes([77]))


def test_client_rejects_a_server_accepting_another_version() -> None:
    reply = server_hello(Verdict(HelloStatus.OK), version=PROTOCOL_VERSION + 1)
    with pytest.raises(VersionMismatch):
        parse_server_hello(reply)


# -- storage identity (issue 12: a controller and a replica on different storage) -----------


@given(token=st.one_of(st.none(), tokens), ours=st.text(max_size=40), theirs=st.text(max_size=40))
def test_a_hello_names_the_controllers_storage_and_a_replica_on_another_refuses(
    token: str | bytes | None, ours: str, theirs: str
) -> None:
    auth = Authenticator(token, storage_id=ours or None, storage="sqlite:///replica.db")
    verdict = auth.judge(client_hello(token, storage_id=theirs or None))
    # Unchecked unless both sides name one; otherwise accepted iff the ids are equal.
    assert verdict.ok == (not ours or not theirs or ours == theirs)
    if not verdict.ok:
        assert verdict.status is HelloStatus.STORAGE_MISMATCH
        assert "sqlite:///replica.db" in verdict.reason and ours in verdict.reason


def test_the_token_is_judged_before_the_storage() -> None:
    auth = Authenticator("secret", storage_id="a", storage="sqlite:///private.db")
    verdict = auth.judge(client_hello("wrong", storage_id="b"))
    assert verdict.status is HelloStatus.AUTHENTICATION_FAILED
    assert "private.db" not in verdict.reason  # nothing about the storage before the token


def test_a_storage_refusal_is_a_typed_error_naming_the_peer() -> None:
    with pytest.raises(StorageMismatch, match=r"replica at h:1 refused.*another storage"):
        raise_for(Verdict(HelloStatus.STORAGE_MISMATCH, "another storage"), "h:1")


@pytest.mark.parametrize("payload", [MAGIC + PROTOCOL_VERSION.to_bytes(2, "big"),
                                     MAGIC + PROTOCOL_VERSION.to_bytes(2, "big") + b"\x00\x09ab"])
def test_a_hello_whose_token_length_lies_is_malformed(payload: bytes) -> None:
    assert Authenticator(None).judge(payload).status is HelloStatus.MALFORMED
