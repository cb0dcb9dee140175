"""The maintenance process's heap (`replica/heap.py`): thresholds fixed where glibc allows, and
the kept heap returned once the process rests — never while it works."""

from __future__ import annotations

import subprocess
import sys

import pytest

from twofold.replica import heap


class FakeLibc:
    def __init__(self) -> None:
        self.trims = 0

    def malloc_trim(self, pad: int) -> int:
        self.trims += 1
        return 1


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(heap.time, "monotonic", lambda: now[0])
    return now


@pytest.fixture
def libc(monkeypatch: pytest.MonkeyPatch) -> FakeLibc:
    fake = FakeLibc()
    monkeypatch.setattr(heap, "_kept", True)
    monkeypatch.setattr(heap, "_libc", lambda: fake)
    return fake


def test_trims_only_after_resting_past_work(clock: list[float], libc: FakeLibc) -> None:
    trim = heap.IdleTrim()
    trim.worked(heap.WORK_S / 2)  # an idle poll or introspection update: not work
    assert trim.due() is None
    trim.idle()
    assert libc.trims == 0
    trim.worked(heap.WORK_S)
    assert trim.due() == pytest.approx(heap.IDLE_S)
    clock[0] += heap.IDLE_S / 2
    trim.idle()
    assert libc.trims == 0  # still working, as far as it knows
    trim.worked(heap.WORK_S * 3)  # more work restarts the wait
    clock[0] += heap.IDLE_S * 0.9
    trim.idle()
    assert libc.trims == 0
    assert trim.due() == pytest.approx(heap.IDLE_S * 0.1)
    clock[0] += heap.IDLE_S * 0.1
    trim.idle()
    assert libc.trims == 1 and trim.trims == 1
    assert trim.due() is None
    clock[0] += 10 * heap.IDLE_S
    trim.idle()
    assert libc.trims == 1  # once per rest, not per idle poll


def test_nothing_pending_unless_the_heap_is_kept(monkeypatch: pytest.MonkeyPatch,
                                                 clock: list[float]) -> None:
    monkeypatch.setattr(heap, "_kept", False)
    trim = heap.IdleTrim()
    trim.worked(1.0)
    assert trim.due() is None


def _keep_in_child(env: dict[str, str]) -> str:
    code = "from twofold.replica import heap; print(heap.keep())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True).stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_keep_sets_the_thresholds_unless_turned_off() -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != heap.ENV}
    assert _keep_in_child(env) == "True"  # in a child: the thresholds are per process
    assert _keep_in_child({**env, heap.ENV: "0"}) == "False"


def test_what_rests_with_the_heap_goes_before_each_trim(clock: list[float],
                                                        libc: FakeLibc) -> None:
    seen: list[int] = []
    trim = heap.IdleTrim(on_rest=lambda: seen.append(libc.trims))
    trim.worked(heap.WORK_S)
    trim.idle()
    assert seen == []
    clock[0] += heap.IDLE_S
    trim.idle()
    assert seen == [0] and libc.trims == 1  # called, and before the trim
