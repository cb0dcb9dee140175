"""The embedded default (`twofold.open()`): two runtimes, maintenance in its own process, over a
scratch SQLite file that is deleted on close; `memory://` keeps both runtimes on threads."""

from __future__ import annotations

from pathlib import Path

import pytest

import twofold

pytestmark = pytest.mark.timeout(120)


def test_the_default_runs_maintenance_in_a_process_over_a_scratch_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TWOFOLD_PLACEMENT", raising=False)
    with twofold.open(tick_interval=0.01, timeout=30) as db:
        replica = db.core.replica
        assert replica is not None and replica.placement == "processes"
        assert replica.maintenance_process is not None
        assert db.core.url.startswith("sqlite:///")
        path = Path(db.core.url.removeprefix("sqlite://"))
        assert path.exists()
        t = db.create_table("t", {"k": int, "v": str})
        t.insert([(k, f"v{k}") for k in range(3000)])
        idx = db.create_index("by_k", t, key="k")
        assert db.lookup(idx, 7).rows == [(7, "v7")]
        assert len(t.collect().rows) == 3000
    assert not path.exists(), "the scratch file outlived the database"
    assert not path.with_name(path.name + "-wal").exists()


def test_memory_storage_keeps_both_runtimes_on_threads() -> None:
    with twofold.open("memory://", tick_interval=0.01, timeout=30) as db:
        replica = db.core.replica
        assert replica is not None and replica.placement == "threads"
        t = db.create_table("t", {"k": int})
        t.insert([(1,)])
        assert t.collect().rows == [(1,)]


def test_threads_by_environment_keep_the_default_in_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWOFOLD_PLACEMENT", "threads")
    with twofold.open(tick_interval=0.01, timeout=30) as db:
        assert db.core.url.startswith("memory://")
        assert db.core.replica is not None and db.core.replica.placement == "threads"
