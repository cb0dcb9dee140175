"""Errors on time (issue 12): a controller whose replicas cannot be reached, refuse it, or go
down says so within its bounds — `wait_connected` at once for a refused configuration and after
its timeout otherwise; reads fail with `ReplicaUnavailable` once every replica has been down for
`unavailable_after`, and work again when one returns. Never the read's whole timeout."""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest

from twofold.client import ComputeClient
from twofold.controller.availability import is_configuration_error
from twofold.controller.backoff import Backoff
from twofold.controller.controller import Controller
from twofold.controller.errors import ReplicaUnavailable
from twofold.protocol import GlobalId
from twofold.transport import (
    AuthenticationFailed,
    ConnectFailed,
    ConnectionLost,
    ConnectTimeout,
    HandshakeFailed,
    StorageMismatch,
    TlsFailed,
    VersionMismatch,
)

from .fakes import FakeReplica
from .helpers import index_dataflow

U1 = GlobalId.user(1)
ROWS = [([1, 10], 1)]


def fast() -> Backoff:
    return Backoff(initial=0.01, cap=0.05)


def failing(exc: BaseException) -> object:
    calls = 0

    async def connect() -> ComputeClient:
        nonlocal calls
        calls += 1
        raise exc

    connect.calls = lambda: calls  # type: ignore[attr-defined]
    return connect


def cause(exc: ConnectFailed, inner: BaseException) -> ConnectFailed:
    exc.__cause__ = inner
    return exc


@pytest.mark.parametrize(
    ("error", "configuration"),
    [
        (AuthenticationFailed("the replica at h:1 refused the connection: wrong token"), True),
        (StorageMismatch("the replica at h:1 refused the connection: another storage"), True),
        (VersionMismatch("wire version 9"), True),
        (HandshakeFailed("h:1 closed the connection during the handshake"), True),
        (cause(ConnectFailed("tls"), ssl.SSLError("wrong version number")), True),
        (TlsFailed("the replica at h:1 hung up on the TLS handshake"), True),
        (cause(ConnectFailed("dns"), socket.gaierror("Name or service not known")), True),
        (cause(ConnectFailed("refused"), ConnectionRefusedError(111, "refused")), False),
        (ConnectTimeout("slow"), False),
        (ConnectionLost("reset"), False),
        (None, False),
    ],
)
def test_configuration_errors_are_told_from_passing_ones(
    error: BaseException | None, configuration: bool
) -> None:
    assert is_configuration_error(error) is configuration


async def test_a_refused_token_fails_wait_connected_at_once_naming_the_replica() -> None:
    connect = failing(AuthenticationFailed("the replica at h:1 refused the connection: wrong"))
    async with Controller({1: connect}, backoff=fast, names={1: "h:1"}) as c:  # type: ignore[dict-item]
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(ReplicaUnavailable, match=r"h:1.*wrong") as info:
            await c.wait_connected(30.0)
        assert loop.time() - start < 5.0  # not the timeout: a refusal is final
        assert info.value.configuration
        assert isinstance(info.value.causes[1], AuthenticationFailed)


async def test_an_unreachable_replica_fails_wait_connected_after_its_timeout() -> None:
    refused = cause(ConnectFailed("cannot connect to the replica at h:2: refused"),
                    ConnectionRefusedError(111, "refused"))  # fmt: skip
    connect = failing(refused)
    async with Controller({2: connect}, backoff=fast, names={2: "h:2"}) as c:  # type: ignore[dict-item]
        with pytest.raises(ReplicaUnavailable, match=r"within 0.3 s.*h:2.*refused") as info:
            await c.wait_connected(0.3)
        assert not info.value.configuration
        assert connect.calls() > 1  # type: ignore[attr-defined]  # it kept retrying meanwhile


async def test_a_silent_replica_fails_wait_connected_saying_it_never_answered() -> None:
    async def hang() -> ComputeClient:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async with Controller({1: hang}, backoff=fast) as c:
        with pytest.raises(ReplicaUnavailable, match="replica 1: no answer yet"):
            await c.wait_connected(0.2)


async def test_wait_connected_returns_once_every_replica_connected() -> None:
    a, b = FakeReplica(), FakeReplica()
    b.refuse = 3  # comes up after a few attempts, within the wait
    async with Controller({1: a.connect, 2: b.connect}, backoff=fast) as c:
        await c.wait_connected(10.0)
        assert c.connections[1].epoch >= 1 and c.connections[2].epoch >= 1
    await a.stop()
    await b.stop()


async def test_reads_fail_promptly_while_every_replica_is_down_and_work_again_after() -> None:
    fake = FakeReplica({U1: ROWS}, answer_peeks=False)
    async with Controller({1: fake.connect}, backoff=fast, unavailable_after=0.3,
                          names={1: "h:1"}) as c:  # fmt: skip
        await c.wait_connected(5.0)
        await c.create_dataflow(index_dataflow(U1, as_of=0))
        pending = asyncio.create_task(c.peek(U1, timeout=60.0))
        await fake.until(lambda: bool(fake.session.pending))
        fake.refuse = 10**6
        fake.kill()
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(ReplicaUnavailable, match=r"0.3 s.*h:1"):
            await pending
        assert loop.time() - start < 10.0  # the watchdog's bound, not the read's 60 s
        assert not c.state.peeks and not c.deliveries.peeks  # abandoned, holds released
        with pytest.raises(ReplicaUnavailable):  # a new read is refused at once
            await c.peek(U1, timeout=60.0)
        fake.refuse = 0
        fake.answer_peeks = True
        await c.connections[1].wait_for_epoch(2)
        assert await c.peek(U1, timeout=10.0) == ROWS
    await fake.stop()


async def test_a_short_outage_only_delays_a_read() -> None:
    fake = FakeReplica({U1: ROWS}, answer_peeks=False)
    async with Controller({1: fake.connect}, backoff=fast, unavailable_after=30.0) as c:
        await c.wait_connected(5.0)
        await c.create_dataflow(index_dataflow(U1, as_of=0))
        pending = asyncio.create_task(c.peek(U1, timeout=60.0))
        await fake.until(lambda: bool(fake.session.pending))
        fake.answer_peeks = True
        fake.kill()  # reconnects at once; the replay re-sends the peek, which is answered
        assert await asyncio.wait_for(pending, 10.0) == ROWS
    await fake.stop()
