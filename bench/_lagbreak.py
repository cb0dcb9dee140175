"""Where a write's delay to its index's frontier goes, from `TWOFOLD_LAG_TRACE`'s lines
(`twofold.replica.lagtrace`): shared by `freshness.py` and `twoway.py`.

Per write, the first maintenance report whose frontier passes it is followed through the
stages: acknowledged -> the poll (step start) that found it -> step end -> its frames written
to the socket -> read by the front -> taken by the multiplexer -> received by the measuring
client (or, embedded, by its frontier watcher, which the controller wakes as it takes each
frontier). Arms without a maintenance process (one runtime, threads) leave no trace and get no
row.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence

import numpy as np

from twofold.replica.lagtrace import ENV

STAGES = ("ack -> poll", "step", "step end -> sent", "sent -> front read", "read -> mux takes",
          "mux -> client")


@contextlib.contextmanager
def tracing() -> Iterator[list[list[str]]]:
    """Trace the processes started (or replicas opened) inside; the lines, once it exits."""
    lines: list[list[str]] = []
    directory = tempfile.mkdtemp(prefix="tf-lagtrace-")
    os.environ[ENV] = directory  # children (replica front, maintenance) inherit it
    try:
        yield lines
    finally:
        del os.environ[ENV]
        for name in sorted(os.listdir(directory)):
            with open(os.path.join(directory, name)) as f:
                lines.extend(line.split("\t") for line in f.read().splitlines())
        shutil.rmtree(directory, ignore_errors=True)


def breakdown(trace: Sequence[list[str]], gid: str, writes: Sequence[tuple[float, int]],
              reports: Sequence[tuple[float, int]]) -> np.ndarray:
    """Per write `(acknowledged wall s, timestamp)`, the stages' durations (ms), one row each
    (columns as `STAGES`); `reports` are the client's `(received wall s, frontier)`."""
    m = sorted((int(r[2]), float(r[3]), float(r[4]), float(r[5]))
               for r in trace if r[0] == "m" and r[1] == gid and r[2] != "None")
    if not m:
        return np.zeros((0, len(STAGES)))
    read = {int(r[2]): float(r[3]) for r in trace if r[0] == "a" and r[1] == gid
            and r[2] != "None"}
    taken = {int(r[2]): float(r[3]) for r in trace if r[0] == "t" and r[1] == gid
             and r[2] != "None"}
    received: dict[int, float] = {}
    for t, f in sorted(reports):
        received.setdefault(f, t)
    covered = np.maximum.accumulate(np.array([u for u, *_ in m], dtype=np.float64))
    rows: list[list[float]] = []
    for ack, ts in writes:
        i = int(np.searchsorted(covered, ts + 1))
        if i >= len(m):
            continue
        upper, polled, stepped, sent = m[i]
        if upper not in read or upper not in taken:
            continue
        got = received.get(upper, float("nan"))  # a report may cover several frontiers
        rows.append([polled - ack, stepped - polled, sent - stepped, read[upper] - sent,
                     taken[upper] - read[upper], got - taken[upper]])
    return np.array(rows).reshape(-1, len(STAGES)) * 1000


def cells(parts: np.ndarray) -> list[str]:
    """`p50 / p99` per stage (NaNs, unseen frontiers, ignored)."""
    out = []
    for k in range(len(STAGES)):
        col = parts[:, k]
        col = col[~np.isnan(col)]
        out.append(f"{np.percentile(col, 50):.1f} / {np.percentile(col, 99):.1f}"
                   if len(col) else "-")
    return out
