"""Per-process CPU over a benchmark arm, from `/proc` (Linux; elsewhere it reports nothing).

On two cores with four busy processes (bench client, replica front, maintenance child, churn
writer), whichever is saturated decides an arm's lookups/s and lag: `CpuMeter` says which.
A process's CPU is its `utime + stime` over the window (all its threads), as a percentage of
one core; `nvcsw` is its threads' involuntary context switches (preempted while runnable).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_ticks(pid: int) -> int | None:
    """utime + stime of `pid` (every thread) in clock ticks, or None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5)


def involuntary_switches(pid: int) -> int:
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if line.startswith("nonvoluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def children(pid: int) -> list[int]:
    """`pid`'s direct children (every thread's)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return out


@dataclass
class CpuMeter:
    """CPU of named processes between `start` and `stop`."""

    pids: dict[str, int] = field(default_factory=dict)
    _t0: float = 0.0
    _ticks0: dict[str, int] = field(default_factory=dict)
    _csw0: dict[str, int] = field(default_factory=dict)
    usage: dict[str, tuple[float, int]] = field(default_factory=dict)  # % of a core, nvcsw
    wall: float = 0.0  # seconds between start and stop

    def start(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)
        self._t0 = time.perf_counter()
        self._ticks0 = {n: cpu_ticks(p) or 0 for n, p in self.pids.items()}
        self._csw0 = {n: involuntary_switches(p) for n, p in self.pids.items()}

    def stop(self) -> None:
        wall = self.wall = time.perf_counter() - self._t0
        for name, pid in self.pids.items():
            ticks = cpu_ticks(pid)
            if ticks is None or wall <= 0:
                continue
            pct = 100 * (ticks - self._ticks0[name]) / _TICK / wall
            self.usage[name] = (pct, involuntary_switches(pid) - self._csw0[name])

    def per_op_us(self, ops: int) -> dict[str, float]:
        """CPU microseconds per operation of each process over the window (`ops` operations):
        a figure that survives load, unlike a rate."""
        if ops <= 0:
            return {}
        return {n: pct / 100 * self.wall / ops * 1e6 for n, (pct, _) in self.usage.items()}

    def line(self) -> str:
        return ", ".join(f"{n} {pct:.0f}% ({csw:,} preempted)"
                         for n, (pct, csw) in self.usage.items()) or "-"
