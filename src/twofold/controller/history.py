"""The command history: every command the controller sent, reduced to the live state.

Contract (`spec/controller.md`, `reference/mz-compute-protocol.md` §7): replaying `commands()` to a
fresh replica after `Hello` re-declares exactly the state the controller wants. `reduce()`
rewrites the history into this fixed order:

1. one `Hello` (the history stores a nil nonce; each connection substitutes a fresh one),
2. one `CreateInstance`,
3. one `UpdateConfiguration` folding every one seen (configuration applies globally, so the
   fold is exact), omitted when it sets nothing,
4. the live `CreateDataflow`s in creation order, each `as_of` advanced to the meet of its
   exports' last compaction frontiers; a dataflow whose `as_of` becomes empty (all exports
   dropped) disappears together with its `Schedule`s and `AllowWrites`,
5. the retained `Schedule`s in original order,
6. the peeks not yet finished, in uuid order (`CancelPeek`s are never replayed),
7. the remaining `AllowCompaction`s in `GlobalId` order (a compaction folded into an `as_of` is
   removed; compactions of ids no dataflow exports — introspection indexes — stay),
8. the retained `AllowWrites` in `GlobalId` order,
9. `InitializationComplete`, if it was sent.

Invariant protected: the reduced history's size is bounded by the live state (live dataflows,
live peeks, compacted ids), never by traffic — `push` reduces whenever the history has doubled
since the last reduction, so its length stays within twice the live size plus one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from uuid import UUID

import msgspec

from twofold.controller.errors import HistoryError
from twofold.protocol import (
    AllowCompaction,
    AllowWrites,
    CancelPeek,
    ComputeCommand,
    ComputeParameters,
    CreateDataflow,
    CreateInstance,
    Frontier,
    GlobalId,
    Hello,
    InitializationComplete,
    Peek,
    Schedule,
    UpdateConfiguration,
)

NIL_NONCE = UUID(int=0)
"""The nonce the history stores in its `Hello`; connections replace it with a fresh one."""


def merge_parameters(base: ComputeParameters, update: ComputeParameters) -> ComputeParameters:
    """`base` updated by `update`: set fields overwrite, dyncfg entries extend."""
    return ComputeParameters(
        max_result_size=(
            update.max_result_size if update.max_result_size is not None else base.max_result_size
        ),
        dyncfg={**base.dyncfg, **update.dyncfg},
    )


class CommandHistory:
    """An append-only log of commands that reduces itself to the live state. Sans-IO."""

    __slots__ = ("_commands", "_finished_peeks", "_reduced_count", "reductions")

    def __init__(self) -> None:
        self._commands: list[ComputeCommand] = []
        self._reduced_count = 0
        # Peeks the controller has finished but whose `CancelPeek` was not (or not yet) recorded.
        self._finished_peeks: set[UUID] = set()
        self.reductions = 0
        """How many times the history was reduced (for tests and metrics)."""

    def __len__(self) -> int:
        return len(self._commands)

    def commands(self) -> list[ComputeCommand]:
        """The commands, in replay order (a copy)."""
        return list(self._commands)

    def __iter__(self) -> Iterator[ComputeCommand]:
        return iter(list(self._commands))

    def push(self, command: ComputeCommand) -> None:
        """Record `command`; reduce when the history has doubled since the last reduction."""
        if isinstance(command, Hello):
            command = Hello(nonce=NIL_NONCE)
        elif isinstance(command, CreateDataflow) and command.dataflow.as_of is None:
            raise HistoryError(
                f"CreateDataflow {command.dataflow.debug_name!r} has no as_of; "
                "the controller must choose one before sending"
            )
        self._commands.append(command)
        if len(self._commands) > 2 * self._reduced_count:
            self.reduce()

    def finish_peek(self, uuid: UUID) -> None:
        """Mark a peek finished: the next reduction forgets it even without a `CancelPeek`."""
        self._finished_peeks.add(uuid)

    def reduce(self) -> None:
        """Rewrite the history into its reduced form (see the module docstring)."""
        hello: Hello | None = None
        create_instance: CreateInstance | None = None
        initialized = False
        params = ComputeParameters()
        dataflows: list[CreateDataflow] = []
        scheduled: list[GlobalId] = []
        compactions: dict[GlobalId, Frontier] = {}
        peeks: dict[UUID, Peek] = {}
        allow_writes: set[GlobalId] = set()

        for cmd in self._commands:
            if isinstance(cmd, Hello):
                if hello is not None:
                    raise HistoryError("the history holds two Hello commands")
                hello = cmd
            elif isinstance(cmd, CreateInstance):
                if create_instance is not None:
                    raise HistoryError("the history holds two CreateInstance commands")
                create_instance = cmd
            elif isinstance(cmd, InitializationComplete):
                initialized = True
            elif isinstance(cmd, UpdateConfiguration):
                params = merge_parameters(params, cmd.params)
            elif isinstance(cmd, CreateDataflow):
                dataflows.append(cmd)
            elif isinstance(cmd, Schedule):
                scheduled.append(cmd.id)
            elif isinstance(cmd, AllowCompaction):
                compactions[cmd.id] = cmd.frontier
            elif isinstance(cmd, Peek):
                peeks[cmd.uuid] = cmd
            elif isinstance(cmd, CancelPeek):
                peeks.pop(cmd.uuid, None)
            elif isinstance(cmd, AllowWrites):
                allow_writes.add(cmd.id)
        for uuid in self._finished_peeks:
            peeks.pop(uuid, None)
        self._finished_peeks.clear()

        live: list[CreateDataflow] = []
        retained: set[GlobalId] = set()
        for cmd in dataflows:
            d = cmd.dataflow
            assert d.as_of is not None  # push refuses dataflows without one
            new_as_of = Frontier.empty()
            for export in d.export_ids():
                new_as_of = new_as_of.meet(compactions.get(export, d.as_of))
            for export in d.export_ids():
                # The compaction is now expressed by the as_of itself.
                if compactions.get(export) == new_as_of:
                    del compactions[export]
            if new_as_of.is_empty:
                continue
            if new_as_of != d.as_of:
                cmd = CreateDataflow(dataflow=msgspec.structs.replace(d, as_of=new_as_of))
            live.append(cmd)
            retained.update(d.export_ids())

        out: list[ComputeCommand] = []
        if hello is not None:
            out.append(hello)
        if create_instance is not None:
            out.append(create_instance)
        if params != ComputeParameters():
            out.append(UpdateConfiguration(params=params))
        out.extend(live)
        out.extend(Schedule(id=i) for i in scheduled if i in retained)
        out.extend(peeks[u] for u in sorted(peeks))
        out.extend(AllowCompaction(id=i, frontier=compactions[i]) for i in sorted(compactions))
        out.extend(AllowWrites(id=i) for i in sorted(allow_writes & retained))
        if initialized:
            out.append(InitializationComplete())
        self._commands = out
        self._reduced_count = len(out)
        self.reductions += 1

    def update_source_uppers(self, upper_of: Callable[[str], Frontier | None]) -> None:
        """Refresh every `SourceImport.upper` in the history from storage (`upper_of(shard)`;
        `None` keeps the recorded one), so a replica built by replay never starts from a stale
        upper of a source shard."""
        for n, cmd in enumerate(self._commands):
            if not isinstance(cmd, CreateDataflow) or not cmd.dataflow.source_imports:
                continue
            d = cmd.dataflow
            sources = {}
            for id, src in d.source_imports.items():
                upper = upper_of(src.shard)
                sources[id] = (
                    src if upper is None or upper == src.upper
                    else msgspec.structs.replace(src, upper=upper)
                )
            if sources != d.source_imports:
                new = msgspec.structs.replace(d, source_imports=sources)
                self._commands[n] = CreateDataflow(dataflow=new)

    def dataflow_exports(self) -> set[GlobalId]:
        """Export ids of the dataflows currently in the history (reduce first for live ones)."""
        return {
            i
            for cmd in self._commands
            if isinstance(cmd, CreateDataflow)
            for i in cmd.dataflow.export_ids()
        }
