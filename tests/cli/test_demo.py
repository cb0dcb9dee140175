"""`twofold demo` runs to completion on the embedded default and prints its summary; the demo's
statistics helpers are right."""

from __future__ import annotations

import math

from typer.testing import CliRunner

from twofold.cli import app
from twofold.cli.demo import DemoReport, PhaseStats, percentile, ratio_line


def test_demo_runs_and_prints_summary() -> None:
    result = CliRunner().invoke(app, ["demo", "--duration", "5", "--customers", "200",
                                      "--no-live"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Summary" in out
    assert "one" in out and "two" in out
    assert "lookup latency ratio" in out


def test_demo_refuses_bad_parameters() -> None:
    result = CliRunner().invoke(app, ["demo", "--duration", "0"])
    assert result.exit_code != 0


def test_percentile_nearest_rank() -> None:
    assert math.isnan(percentile([], 0.5))
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(100)], 0.99) == 99.0


def test_ratio_line_compares_phases() -> None:
    report = DemoReport([PhaseStats("one", lookups=[0.004] * 10),
                         PhaseStats("two", lookups=[0.001] * 10)])
    assert "p50 one/two = 4.00x" in ratio_line(report)
    assert "n/a" in ratio_line(DemoReport([PhaseStats("one"), PhaseStats("two")]))


def test_live_view_renders_collections_and_runtimes() -> None:
    from rich.console import Console

    from twofold.cli.demo import live_view

    stats = PhaseStats("two", lookups=[0.001, 0.002], peeks={"interactive": [0.0005]},
                       steps={"maintenance": [0.05]}, writes=3, rows_written=150, elapsed=1.0,
                       collections=[("orders", "Table", 12), ("revenue", "Index", None)])
    console = Console(record=True, width=120)
    console.print(live_view(stats, 15))
    text = console.export_text()
    for needle in ("runtimes=two", "orders", "revenue", "interactive", "maintenance", "p50"):
        assert needle in text
