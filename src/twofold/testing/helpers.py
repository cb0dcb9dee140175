"""Small test helpers every test directory shares: one bounded wait, one multiset.

**Test-only.** Contract:

- `until(done, what, timeout, step=...)` waits until `done()` holds and fails the test with an
  `AssertionError` naming `what` after `timeout` seconds — never hangs, never sleeps a fixed
  time. Between checks it awaits `step(remaining)`, which makes progress or waits for a reason
  to re-check: receive a response, wait on a condition; by default it polls every 10 ms. A
  `step` bounds itself by `remaining` (it must not outlive the deadline by much).
- `churn(table, rows, rng, new)` applies one random write round to a table and to its model
  list: deletes about 30% of the model's rows, then inserts `new`.
- `child_process(argv)` runs a program whose stdout the test reads line by line, with stderr
  kept in a file (`communicate()` would lose what the line reader buffered); on leaving, a
  child still running is killed, and `.err` holds everything it wrote to stderr.
- `multiset(rows)` consolidates `(row, diff)` pairs into `{row tuple: count}` with no zero
  counts: the form two collections are compared in.
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

WAIT = 15.0
"""Default bound of one wait: generous, for a loaded, shared 2-core machine."""

Multiset = dict[tuple[Any, ...], int]
"""A collection: row (as a tuple) -> multiplicity, zero counts absent."""


def multiset(rows: Iterable[tuple[Sequence[Any], int]]) -> Multiset:
    out: dict[tuple[Any, ...], int] = defaultdict(int)
    for row, diff in rows:
        out[tuple(row)] += diff
    return {k: v for k, v in out.items() if v}


async def _poll(remaining: float) -> None:
    await asyncio.sleep(min(0.01, remaining))


async def until(
    done: Callable[[], bool],
    what: str,
    timeout: float = WAIT,
    step: Callable[[float], Awaitable[object]] = _poll,
) -> None:
    """Wait until `done()`; fail the test after `timeout` seconds (see the module docstring)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not done():
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        try:
            await step(remaining)
        except TimeoutError:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}") from None


def churn(table: Any, rows: list[Any], rng: Any, new: list[Any]) -> None:
    """One random write round: delete about 30% of `rows` (drawn with `rng`) from `table`,
    then insert `new`; `rows`, the model of the table's contents, follows both."""
    gone = [r for r in rows if rng.random() < 0.3]
    if gone:
        table.delete(gone)
        for r in gone:
            rows.remove(r)
    if new:
        table.insert(new)
        rows.extend(new)


@dataclass
class Child:
    """A running child: `proc` (its stdout a text pipe), and after the `with`, `err`."""

    proc: subprocess.Popen[str]
    stdout: IO[str]
    err: str = ""


@contextmanager
def child_process(argv: Sequence[str]) -> Iterator[Child]:
    errors = tempfile.TemporaryFile("w+")  # noqa: SIM115 (read and closed below)
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=errors, text=True)
    assert proc.stdout is not None
    child = Child(proc, proc.stdout)
    try:
        yield child
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        errors.seek(0)
        child.err = errors.read()
        errors.close()
