"""Frontier reporting: the per-collection obligations of `spec/protocol.md` §5.

`FrontierReporter` turns "this is where collection X is now" observations into `Frontiers`
responses that never regress, report only changes, and stop for good after a kind reached the
empty frontier. It is pure bookkeeping: the worker calls `observe` and collects the responses.
"""

from __future__ import annotations

from dataclasses import dataclass

from twofold.protocol import Frontier, Frontiers, GlobalId


@dataclass
class _Reported:
    write: Frontier | None = None
    input: Frontier | None = None
    output: Frontier | None = None


def _advance(last: Frontier | None, new: Frontier) -> Frontier | None:
    """`new` if it is a strict advance over `last` (or the first report), else `None`."""
    if last is None or last < new:
        return new
    return None


class FrontierReporter:
    """Per collection, the last reported frontier of each kind."""

    def __init__(self) -> None:
        self._reported: dict[GlobalId, _Reported] = {}

    def observe(
        self, id: GlobalId, write: Frontier, input: Frontier | None = None,
        output: Frontier | None = None,
    ) -> Frontiers | None:
        """The report for `id` now, or `None` if nothing advanced."""
        r = self._reported.setdefault(id, _Reported())
        w = _advance(r.write, write)
        i = _advance(r.input, input) if input is not None else None
        o = _advance(r.output, output if output is not None else write)
        if w is None and i is None and o is None:
            return None
        r.write = w or r.write
        r.input = i or r.input
        r.output = o or r.output
        return Frontiers(id, write_frontier=w, input_frontier=i, output_frontier=o)

    def close(self, id: GlobalId) -> Frontiers | None:
        """Every kind reported `empty()` (after a drop), unless already reported; then forget."""
        r = self._reported.pop(id, _Reported())
        empty = Frontier.empty()
        w = None if r.write == empty else empty
        i = None if r.input == empty else empty
        o = None if r.output == empty else empty
        if w is None and i is None and o is None:
            return None
        return Frontiers(id, write_frontier=w, input_frontier=i, output_frontier=o)

    def reset(self) -> None:
        self._reported.clear()
