"""The allocator settings applied when twofold is imported (`twofold/_alloc.py`)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from twofold import _alloc

PROBE = (
    "import json, os, twofold; "
    "print(json.dumps([twofold.ALLOCATOR, os.environ.get('_RJEM_MALLOC_CONF')]))"
)


def _probe(**env: str) -> tuple[dict[str, bool], str | None]:
    clean = {k: v for k, v in os.environ.items()
             if k not in (_alloc.JEMALLOC_ENV, _alloc.OPT_OUT_ENV)}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env},
                         capture_output=True, text=True, check=True).stdout
    applied, conf = json.loads(out)
    return applied, conf


def test_a_fresh_process_keeps_freed_memory_for_reuse() -> None:
    applied, conf = _probe()
    assert applied["jemalloc"] is True
    assert conf == _alloc.JEMALLOC_CONF


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_thresholds_are_accepted() -> None:
    applied, _ = _probe()
    assert applied["glibc"] is True


def test_a_setting_the_user_made_is_left_alone() -> None:
    applied, conf = _probe(_RJEM_MALLOC_CONF="dirty_decay_ms:5")
    assert applied["jemalloc"] is False
    assert conf == "dirty_decay_ms:5"


def test_opting_out_changes_nothing() -> None:
    applied, conf = _probe(TWOFOLD_ALLOCATOR="system")
    assert applied == {"jemalloc": False, "glibc": False}
    assert conf is None


def test_too_late_once_polars_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    # This test process has polars loaded: jemalloc has read its settings already.
    import polars  # noqa: F401

    monkeypatch.delenv(_alloc.JEMALLOC_ENV, raising=False)
    monkeypatch.delenv(_alloc.OPT_OUT_ENV, raising=False)
    assert _alloc.configure()["jemalloc"] is False
    assert _alloc.JEMALLOC_ENV not in os.environ
