"""What the controller still needs of each storage shard (for its critical reader there).

`spec/controller.md`: a dataflow holds its inputs at its `as_of`. A replica (re)built by replay
creates each live dataflow at its `as_of` advanced to the meet of its exports' compaction
frontiers (`history.py`), and reads each source shard from there. So the controller needs each
source shard from the earliest such frontier over the live dataflows that import it.
`storage.holds.ControllerHolds` keeps the controller's critical reader of each shard no later
than this (and no later than its read window behind the shard's upper).

Read from the storage ticker's thread while the event loop changes the state: it works on
copies of the history and the collections (each copy is one atomic C-level operation) and only
reads frozen values from them. A dataflow created meanwhile is not in what it read: its `as_of`
is covered by the `SinceHold` under which it was chosen (`ControllerHolds.hold`), which the
step honours until it has read these needs again — not by the read window (an `as_of` need
not be recent: a view created right after its table starts at the table's first time).
"""

from __future__ import annotations

from twofold.controller.instance import InstanceState
from twofold.protocol import CreateDataflow, Frontier


def storage_holds(state: InstanceState) -> dict[str, Frontier]:
    """Per source shard, the earliest time a replay of the live dataflows would read it."""
    commands = state.history.commands()
    collections = dict(state.collections)
    out: dict[str, Frontier] = {}
    for cmd in commands:
        if not isinstance(cmd, CreateDataflow) or not cmd.dataflow.source_imports:
            continue
        d = cmd.dataflow
        need = Frontier.empty()
        for export in d.export_ids():
            c = collections.get(export)
            if c is not None:
                need = need.meet(c.since)
        if need.is_empty:  # every export dropped (or forgotten): nothing replays it
            continue
        for src in d.source_imports.values():
            out[src.shard] = out.get(src.shard, Frontier.empty()).meet(need)
    return out
