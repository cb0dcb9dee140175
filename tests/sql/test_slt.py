"""sqllogictest files: ours (`tests/sql/slt/*.slt`, each also run against DuckDB, which checks
the expected results they hold) and the SQLite project's `select1.test` from the shared corpus
when it is present beside the checkout (`../shared/slt`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.sql.pgcompare import fresh_database
from tests.sql.slt import PostgresEngine, TwofoldEngine, run_file

HERE = Path(__file__).parent / "slt"
OURS = sorted(HERE.glob("*.slt"))
SHARED = Path(__file__).resolve().parents[3] / "shared" / "slt"


def _twofold() -> TwofoldEngine:
    # memory:// keeps both runtimes on threads: the files check SQL answers, and each read
    # skips the SQLite round trips and the maintenance process (select1: ~40% less time; the
    # default placement is tested in tests/replica, tests/storage; bench/sql.py times it).
    return TwofoldEngine("memory://")


@pytest.mark.parametrize("path", OURS, ids=[p.stem for p in OURS])
def test_ours_against_duckdb(path: Path) -> None:
    report = run_file(path, "duckdb")
    assert not report.failures, "\n".join(report.failures)
    assert report.passed > 0


@pytest.mark.parametrize("path", OURS, ids=[p.stem for p in OURS])
def test_ours(path: Path) -> None:
    report = run_file(path, "twofold", make=_twofold)
    assert not report.failures, "\n".join(report.failures)
    assert report.passed > 0


@pytest.mark.parametrize("name", ["views_drop", "surface", "pg_surface"])
def test_against_postgres(name: str, servers: Any) -> None:
    """These files also against PostgreSQL, which checks their SQLSTATEs (2BP01 for a DROP
    others depend on, 42809 for DROP VIEW of a table) — DuckDB reports none. Each in a fresh
    database of the session's cluster (skipped, saying why, where none can be started)."""
    with fresh_database(servers, "slt") as con:
        report = run_file(HERE / f"{name}.slt", "postgres", make=lambda: PostgresEngine(con))
    assert not report.failures, "\n".join(report.failures)
    assert report.passed > 20


@pytest.mark.timeout(1800)  # 3-10 min on a loaded 2-core machine
@pytest.mark.skipif(not (SHARED / "select1.test").exists(),
                    reason="the shared sqllogictest corpus (../shared/slt) is not beside this "
                           "checkout")
def test_select1() -> None:
    report = run_file(SHARED / "select1.test", "twofold", make=_twofold)
    assert not report.failures, f"{len(report.failures)} failures:\n" + "\n".join(
        report.failures[:20])
    assert report.passed > 1000
