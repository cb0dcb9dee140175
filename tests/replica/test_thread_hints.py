"""A two-runtime replica gives its runtimes their scheduling hints (`runtime/sched.py`):
maintenance a higher nice value, interactive the latency slice, a solo runtime neither.
(That a `RuntimeClient` applies its hints on its own thread is tested in tests/runtime.)"""

from __future__ import annotations

import pytest

from twofold.replica import Replica
from twofold.runtime.sched import ThreadHints


async def test_two_runtimes_get_their_hints() -> None:
    replica = Replica(None, "two", maintenance_nice=4, latency_slice_us=300)
    await replica.start()
    try:
        assert replica.runtimes["maintenance"].hints == ThreadHints(nice=4)
        assert replica.runtimes["interactive"].hints == ThreadHints(slice_us=300)
    finally:
        await replica.close()


async def test_a_solo_runtime_keeps_the_defaults() -> None:
    replica = Replica(None, "one", maintenance_nice=4, latency_slice_us=300)
    await replica.start()
    try:
        assert replica.runtimes["solo"].hints.is_default
    finally:
        await replica.close()


def test_slice_comes_from_the_env_and_zero_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWOFOLD_LATENCY_SLICE_US", "250")
    assert Replica(None, "two").latency_slice_us == 250
    assert Replica(None, "two", latency_slice_us=0).latency_slice_us is None
    assert Replica(None, "two", latency_slice_us=120).latency_slice_us == 120
    monkeypatch.setenv("TWOFOLD_LATENCY_SLICE_US", "0")
    assert Replica(None, "two").latency_slice_us is None


def test_maintenance_nice_defaults_by_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    """+10 as a thread beside interactive (they share the GIL; the read should win a core);
    0 as a process of its own (at +10 any busy nice-0 process starves it)."""
    monkeypatch.delenv("TWOFOLD_MAINTENANCE_NICE", raising=False)
    assert Replica("memory://hints", "two").maintenance_nice == 10
    assert Replica("sqlite:///hints.db", "two", placement="threads").maintenance_nice == 10
    assert Replica("sqlite:///hints.db", "two", placement="processes").maintenance_nice == 0
    monkeypatch.setenv("TWOFOLD_MAINTENANCE_NICE", "5")
    assert Replica("sqlite:///hints.db", "two", placement="processes").maintenance_nice == 5
