"""The routing table as the spec states it (`spec/multiplexer.md`), written independently of
`twofold.multiplex.Router`: for each command, the runtimes it reaches and the violations it
commits. The oracle of both the router's model-based test and the multiplexer's property test.
"""

from __future__ import annotations

from twofold.multiplex import Runtime
from twofold.protocol import (
    AllowCompaction,
    AllowWrites,
    ComputeCommand,
    CreateDataflow,
    CreateInstance,
    GlobalId,
    Hello,
    IndexTarget,
    InitializationComplete,
    Peek,
    Schedule,
    UpdateConfiguration,
)

MAINT, INTER = Runtime.MAINTENANCE, Runtime.INTERACTIVE


class RoutingModel:
    """The table as the spec states it: id -> (owner, published)."""

    def __init__(self) -> None:
        self.live: dict[GlobalId, tuple[Runtime, bool]] = {}

    def route(self, c: ComputeCommand, apply: bool) -> tuple[list[Runtime], list[str]]:
        live = dict(self.live)
        violations: list[str] = []
        to: list[Runtime]
        if isinstance(c, Hello):
            to = [MAINT, INTER]
            live.clear()
        elif isinstance(c, CreateInstance | CreateDataflow):
            if isinstance(c, CreateInstance):
                to = [MAINT, INTER]
                entries = [(g, (MAINT, True)) for g in c.config.logging.index_logs.values()]
            elif c.dataflow.is_peek_dataflow():
                to = [INTER]
                entries = [(g, (INTER, False)) for g in c.dataflow.export_ids()]
            else:
                to = [MAINT]
                entries = [
                    (g, (MAINT, g in c.dataflow.index_exports)) for g in c.dataflow.export_ids()
                ]
            for g, entry in entries:
                if g in live:
                    violations.append("declared_twice")
                live[g] = entry
        elif isinstance(c, Schedule | AllowWrites | AllowCompaction):
            owner = live.get(c.id)
            if owner is None:
                violations.append("undeclared")
                to = [MAINT]
            elif isinstance(c, AllowCompaction) and owner == (MAINT, True):
                to = [MAINT, INTER]
            else:
                to = [owner[0]]
            if isinstance(c, AllowCompaction) and c.frontier.is_empty:
                live.pop(c.id, None)
        elif isinstance(c, Peek):
            to = [INTER]
            if isinstance(c.target, IndexTarget) and c.target.id not in live:
                violations.append("peek_undeclared")
        elif isinstance(c, InitializationComplete | UpdateConfiguration):
            to = [MAINT, INTER]
        else:
            to = [INTER]
        if apply:
            self.live = live
        return to, violations
