"""Runtime metrics across the process boundary: each process sends its own runtime's histograms
(`wire.MetricsSync`) so that both hold both runtimes' — the maintenance process for its
introspection indexes (`peek_durations`, `step_durations`), the front for `Replica.metrics`."""

from __future__ import annotations

from typing import Final

from twofold.replica import wire
from twofold.runtime.introspection import ReplicaMetrics

METRICS_INTERVAL: Final = 0.1
"""Seconds between metric syncs."""


def metrics_message(metrics: ReplicaMetrics, runtime: str, seen: tuple[int, int]
                    ) -> tuple[wire.MetricsSync, tuple[int, int]] | None:
    """A `MetricsSync` of `runtime`'s histograms if any sample came after `seen` (the totals
    of the last sync), with the new totals."""
    peeks, peek_new, peek_total = metrics.peek_durations.export(runtime, seen[0])
    steps, step_new, step_total = metrics.step_durations.export(runtime, seen[1])
    if (peek_total, step_total) == seen:
        return None
    return (wire.MetricsSync(runtime, peeks, steps, peek_new, step_new), (peek_total, step_total))


def absorb_metrics(metrics: ReplicaMetrics, sync: wire.MetricsSync) -> None:
    """Take another process's histograms of `sync.runtime`."""
    metrics.peek_durations.absorb(sync.runtime, sync.peek_counts, sync.peek_recent)
    metrics.step_durations.absorb(sync.runtime, sync.step_counts, sync.step_recent)
