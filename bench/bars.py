"""Verdicts for benchmarks: every bar and every operation check prints one line, and the process
exits non-zero if any bar was missed or any operation failed.

A benchmark that prints PASS while its operations errored, or that exits 0 on a missed bar,
makes `make bench` meaningless. So each benchmark states, through one `Verdicts`:

- `ok(what, failed, total)` — the operations it timed succeeded (`failed` of `total` did not:
  errors, wrong row counts, timeouts); a figure measured over failed operations is no figure;
- `at_most(what, value, bar)` / `at_least(what, value, bar)` — a measured figure against its bar;
- `check(what, passed, detail)` — any other yes/no bar, with the figure that decided it;

then ends with `verdicts.exit()` (exit status 1 if anything failed, else 0). Lines look like

    bar two-loaded p99 / idle p99 <= 2.0: PASS (1.05)
    bar one-loaded p99 / two-loaded p99 >= 10.0: FAIL (7.31)
    ops lookups answered (two loaded): FAIL (3 of 2,000 failed)
    isolation: FAIL (1 bar missed, 1 operation check failed)

Usage (bench/ is the script's directory, so `from bars import Verdicts` imports this file):

    verdicts = Verdicts("isolation")
    verdicts.ok("lookups answered", failed=arm.errors, total=len(arm.latencies_ms))
    verdicts.at_most("two-loaded p99 / idle p99", two_p99 / idle_p99, 2.0)
    verdicts.exit()
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field


def _number(bar: float) -> str:
    """A bar as people write it: `2`, `0.5`, `2,000`, `1,000,000`."""
    return f"{bar:,.0f}" if float(bar).is_integer() and abs(bar) >= 1000 else f"{bar:g}"


@dataclass
class Verdicts:
    """The bars and operation checks of one benchmark run, printed as they are recorded."""

    bench: str
    out: Callable[[str], None] = print
    missed: list[str] = field(default_factory=list)
    failed_ops: list[str] = field(default_factory=list)
    passed: int = 0

    def check(self, what: str, passed: bool, detail: str) -> bool:
        """A bar decided elsewhere: `passed`, with the figure that decided it in `detail`."""
        self.out(f"bar {what}: {'PASS' if passed else 'FAIL'} ({detail})")
        if passed:
            self.passed += 1
        else:
            self.missed.append(what)
        return passed

    def at_most(self, what: str, value: float, bar: float, fmt: str = "{:.2f}") -> bool:
        """`value <= bar`; a NaN value (nothing measured) fails."""
        passed = not math.isnan(value) and value <= bar
        return self.check(f"{what} <= {_number(bar)}", passed, fmt.format(value))

    def at_least(self, what: str, value: float, bar: float, fmt: str = "{:.2f}") -> bool:
        """`value >= bar`; a NaN value (nothing measured) fails."""
        passed = not math.isnan(value) and value >= bar
        return self.check(f"{what} >= {_number(bar)}", passed, fmt.format(value))

    def ok(self, what: str, failed: int, total: int) -> bool:
        """`total` operations ran and none of them failed (zero operations is a failure: a
        benchmark that measured nothing has not passed)."""
        passed = failed == 0 and total > 0
        detail = f"{failed:,} of {total:,} failed" if total else "no operations ran"
        self.out(f"ops {what}: {'PASS' if passed else 'FAIL'} ({detail})")
        if passed:
            self.passed += 1
        else:
            self.failed_ops.append(what)
        return passed

    @property
    def all_passed(self) -> bool:
        return not self.missed and not self.failed_ops

    def summary(self) -> str:
        if self.all_passed:
            return f"{self.bench}: PASS ({self.passed} checks)"
        parts = []
        if self.missed:
            parts.append(f"{len(self.missed)} bar{'s' if len(self.missed) > 1 else ''} missed")
        if self.failed_ops:
            n = len(self.failed_ops)
            parts.append(f"{n} operation check{'s' if n > 1 else ''} failed")
        return f"{self.bench}: FAIL ({', '.join(parts)})"

    def exit_code(self) -> int:
        return 0 if self.all_passed else 1

    def exit(self) -> None:
        """Print the summary and end the process: status 1 if anything failed, else 0."""
        self.out(self.summary())
        sys.exit(self.exit_code())
