"""`bench/bars.py`: a benchmark's verdicts and exit status (benchmarks themselves are not run
by the suite; this checks the one place that decides whether they passed)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from bench.bars import Verdicts

BENCH = Path(__file__).parent.parent / "bench"


def verdicts() -> tuple[Verdicts, list[str]]:
    lines: list[str] = []
    return Verdicts("demo", out=lines.append), lines


def test_all_met_exits_zero_and_says_pass() -> None:
    v, lines = verdicts()
    v.at_most("p99 ratio", 1.05, 2.0)
    v.at_least("rate", 2500.0, 2000, "{:,.0f}")
    v.ok("lookups answered", 0, 2000)
    v.at_least("snapshot updates/s", 2e6, 1_000_000, "{:,.0f}")
    assert lines == [
        "bar p99 ratio <= 2: PASS (1.05)",
        "bar rate >= 2,000: PASS (2,500)",
        "ops lookups answered: PASS (0 of 2,000 failed)",
        "bar snapshot updates/s >= 1,000,000: PASS (2,000,000)",
    ]
    assert v.exit_code() == 0 and v.summary() == "demo: PASS (4 checks)"
    with pytest.raises(SystemExit) as exited:
        v.exit()
    assert exited.value.code == 0


def test_a_missed_bar_fails_with_its_figure_and_exits_one() -> None:
    v, lines = verdicts()
    v.at_least("one / two p99", 7.31, 10.0)
    assert lines == ["bar one / two p99 >= 10: FAIL (7.31)"]
    assert v.summary() == "demo: FAIL (1 bar missed)"
    with pytest.raises(SystemExit) as exited:
        v.exit()
    assert exited.value.code == 1


def test_failed_or_missing_operations_fail_even_when_bars_pass() -> None:
    v, lines = verdicts()
    v.at_most("p99 ratio", 1.0, 2.0)
    v.ok("lookups answered", 3, 2000)
    v.ok("scans answered", 0, 0)
    assert lines[1:] == [
        "ops lookups answered: FAIL (3 of 2,000 failed)",
        "ops scans answered: FAIL (no operations ran)",
    ]
    assert v.exit_code() == 1
    assert v.summary() == "demo: FAIL (2 operation checks failed)"


def test_nothing_measured_is_not_a_pass() -> None:
    v, _ = verdicts()
    assert not v.at_most("ratio", math.nan, 2.0)
    assert not v.at_least("rate", math.nan, 1.0)
    assert not v.check("custom", False, "why")
    assert v.summary() == "demo: FAIL (3 bars missed)"


def test_every_benchmark_decides_its_exit_status_through_verdicts() -> None:
    """A benchmark that prints PASS/FAIL itself, or never calls `exit`/`exit_code`, can exit 0 on
    a missed bar."""
    scripts = [p for p in sorted(BENCH.glob("*.py")) if "__main__" in p.read_text()]
    assert scripts
    for path in scripts:
        text = path.read_text()
        assert "Verdicts(" in text, f"{path.name} does not use bench/bars.py"
        assert re.search(r"\.exit\(\)|\.exit_code\(\)", text), f"{path.name} ignores its verdict"
        assert not re.search(r"'PASS' if", text), f"{path.name} prints its own PASS/FAIL"
