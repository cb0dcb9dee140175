"""The multiplexer's routing table: a pure decision object, no I/O (`spec/multiplexer.md`).

`Router.route(command)` returns the `Routing` of one command — the ordered list of
`(runtime, command)` deliveries — and updates the table of live collections;
`Router.screen(runtime, response)` decides whether a response is forwarded. Nothing here awaits,
logs or touches a client: the asyncio `Multiplexer` moves the messages, this object decides.

Invariants it protects:
- Routing follows collection identity: a command naming a collection goes to the runtime that
  owns it; the table holds every collection declared on this connection and not yet dropped.
- Deliveries carry the very command object that was routed: nothing is copied, capped or
  rewritten. The controller's history derives `as_of`s from the compactions it sent, so a
  modified frontier would change what a reconnect replays.
- Lifecycle commands reach maintenance before interactive.
- With `strict=True` a violation raises `ProtocolViolation` before the table changes; with
  `strict=False` it is counted in `violations` and handled as the spec's lenient rule says.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from twofold.protocol import (
    AllowCompaction,
    AllowWrites,
    CancelPeek,
    ComputeCommand,
    ComputeResponse,
    CreateDataflow,
    CreateInstance,
    Frontiers,
    GlobalId,
    Hello,
    IndexTarget,
    InitializationComplete,
    Peek,
    Schedule,
    UpdateConfiguration,
)


class Runtime(enum.IntEnum):
    """The two runtimes behind one replica; the value indexes `(maintenance, interactive)`."""

    MAINTENANCE = 0
    INTERACTIVE = 1

    @property
    def label(self) -> str:
        return self.name.lower()


MAINTENANCE: Final = Runtime.MAINTENANCE
INTERACTIVE: Final = Runtime.INTERACTIVE


class ViolationKind(enum.StrEnum):
    """The protocol violations the multiplexer detects; the values key `Router.violations`."""

    UNDECLARED = "undeclared"
    DECLARED_TWICE = "declared_twice"
    PEEK_UNDECLARED = "peek_undeclared"
    FOREIGN_FRONTIERS = "foreign_frontiers"


@dataclass(frozen=True, slots=True)
class Violation:
    """One detected violation: its kind, the collection it names, and a readable message."""

    kind: ViolationKind
    id: GlobalId
    message: str


class ProtocolViolation(Exception):
    """A command or response outside the compute protocol (raised in strict mode).

    `kind`, `id` and `subject` (the offending command or response) say what was wrong; the
    message names the command or response and the id.
    """

    def __init__(self, violation: Violation, subject: ComputeCommand | ComputeResponse) -> None:
        super().__init__(violation.message)
        self.kind = violation.kind
        self.id = violation.id
        self.subject = subject


@dataclass(frozen=True, slots=True)
class Collection:
    """A live collection: the runtime that owns it, and whether maintenance publishes it as an
    index that interactive may read (so interactive must see its compactions)."""

    runtime: Runtime
    published: bool


Delivery = tuple[Runtime, ComputeCommand]


@dataclass(frozen=True, slots=True)
class Routing:
    """Where one command goes, in order, and the violations it committed (lenient mode)."""

    deliveries: tuple[Delivery, ...]
    violations: tuple[Violation, ...] = ()


# A rule's verdict before it is applied: kept separate from the table update so that strict mode
# can raise with the table untouched.
@dataclass(frozen=True, slots=True)
class _Decision:
    to: tuple[Runtime, ...]
    declare: tuple[tuple[GlobalId, Collection], ...] = ()
    drop: GlobalId | None = None
    reset: bool = False
    violations: tuple[Violation, ...] = ()


_Table = Mapping[GlobalId, Collection]
_BOTH: Final = (MAINTENANCE, INTERACTIVE)
_LIFECYCLE: Final = _Decision(_BOTH)
_TO_INTERACTIVE: Final = _Decision((INTERACTIVE,))
_PUBLISHED_MAINTAINED: Final = Collection(MAINTENANCE, published=True)
_TRANSIENT_INTERACTIVE: Final = Collection(INTERACTIVE, published=False)


def _declarations(
    table: _Table, command: str, entries: list[tuple[GlobalId, Collection]]
) -> tuple[tuple[tuple[GlobalId, Collection], ...], tuple[Violation, ...]]:
    """The declarations of one command, and a `declared_twice` violation for every id that is
    already live or repeated within the command."""
    violations: list[Violation] = []
    seen: dict[GlobalId, Collection] = {}
    for gid, collection in entries:
        earlier = seen[gid] if gid in seen else table.get(gid)
        if earlier is not None:
            violations.append(
                Violation(
                    ViolationKind.DECLARED_TWICE,
                    gid,
                    f"{command} declares collection {gid} twice: it is already live on "
                    f"{earlier.runtime.label} and no Hello came in between",
                )
            )
        seen[gid] = collection
    return tuple(entries), tuple(violations)


def _hello(table: _Table, command: Hello) -> _Decision:
    return _Decision(_BOTH, reset=True)


def _create_instance(table: _Table, command: CreateInstance) -> _Decision:
    # Introspection indexes are rendered by maintenance itself and published, so interactive
    # reads them from the registry and must see their compactions.
    ids = command.config.logging.index_logs.values()
    declare, violations = _declarations(
        table, "CreateInstance", [(gid, _PUBLISHED_MAINTAINED) for gid in ids]
    )
    return _Decision(_BOTH, declare=declare, violations=violations)


def _lifecycle(table: _Table, command: InitializationComplete | UpdateConfiguration) -> _Decision:
    return _LIFECYCLE


def _create_dataflow(table: _Table, command: CreateDataflow) -> _Decision:
    dataflow = command.dataflow
    if dataflow.is_peek_dataflow():
        host = INTERACTIVE
        entries = [(gid, _TRANSIENT_INTERACTIVE) for gid in dataflow.export_ids()]
    else:
        host = MAINTENANCE
        entries = [
            (gid, Collection(MAINTENANCE, published=gid in dataflow.index_exports))
            for gid in dataflow.export_ids()
        ]
    declare, violations = _declarations(table, "CreateDataflow", entries)
    return _Decision((host,), declare=declare, violations=violations)


def _undeclared(command: str, gid: GlobalId) -> Violation:
    return Violation(
        ViolationKind.UNDECLARED,
        gid,
        f"{command} names collection {gid}, which is undeclared or dropped",
    )


def _follow_owner(table: _Table, command: Schedule | AllowWrites) -> _Decision:
    owner = table.get(command.id)
    if owner is None:
        # Lenient fallback: maintenance is the default owner, as in Materialize.
        violation = _undeclared(type(command).__name__, command.id)
        return _Decision((MAINTENANCE,), violations=(violation,))
    return _Decision((owner.runtime,))


def _allow_compaction(table: _Table, command: AllowCompaction) -> _Decision:
    gid = command.id
    owner = table.get(gid)
    # Every id leaves the table on its empty compaction (not only interactive-owned ones), so a
    # later command naming it is detected as a violation.
    drop = gid if command.frontier.is_empty else None
    if owner is None:
        # Unknown ids are not broadcast: nothing says interactive reads them.
        return _Decision(
            (MAINTENANCE,), drop=drop, violations=(_undeclared("AllowCompaction", gid),)
        )
    if owner.runtime is MAINTENANCE and owner.published:
        # Broadcast: interactive applies it as a standing hold on its published copy, so the
        # create of a reader and the compactions after it stay on one ordered stream (I1c).
        return _Decision(_BOTH, drop=drop)
    return _Decision((owner.runtime,), drop=drop)


def _peek(table: _Table, command: Peek) -> _Decision:
    target = command.target
    # Storage targets name storage collections, which are not compute collections: unchecked.
    if isinstance(target, IndexTarget) and target.id not in table:
        violation = Violation(
            ViolationKind.PEEK_UNDECLARED,
            target.id,
            f"Peek {command.uuid} targets index {target.id}, which is undeclared or dropped",
        )
        return _Decision((INTERACTIVE,), violations=(violation,))
    return _TO_INTERACTIVE


def _cancel_peek(table: _Table, command: CancelPeek) -> _Decision:
    return _TO_INTERACTIVE


# The routing table, one rule per command kind (see the table in spec/multiplexer.md).
_RULES: Final[dict[type, Callable[[_Table, Any], _Decision]]] = {
    Hello: _hello,
    CreateInstance: _create_instance,
    InitializationComplete: _lifecycle,
    UpdateConfiguration: _lifecycle,
    CreateDataflow: _create_dataflow,
    Schedule: _follow_owner,
    AllowWrites: _follow_owner,
    AllowCompaction: _allow_compaction,
    Peek: _peek,
    CancelPeek: _cancel_peek,
}


def _new_counts() -> dict[str, int]:
    return {kind.value: 0 for kind in ViolationKind}


class Router:
    """The routing table of one multiplexer. See the module docstring."""

    __slots__ = ("_collections", "_view", "strict", "violations")

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self._collections: dict[GlobalId, Collection] = {}
        self._view = MappingProxyType(self._collections)
        self.violations: dict[str, int] = _new_counts()
        """Cumulative violation counts (never reset by `Hello`), keyed by `ViolationKind`."""

    @property
    def collections(self) -> Mapping[GlobalId, Collection]:
        """A live, read-only view of the live collections."""
        return self._view

    def route(self, command: ComputeCommand) -> Routing:
        """Decide where `command` goes and apply its table effect.

        Raises `ProtocolViolation` (strict mode) before the table changes, and `TypeError` for
        a value that is not a compute command.
        """
        rule = _RULES.get(type(command))
        if rule is None:
            raise TypeError(f"not a ComputeCommand: {type(command).__name__}")
        decision = rule(self._collections, command)
        violations = decision.violations
        if violations:
            if self.strict:
                raise ProtocolViolation(violations[0], command)
            counts = self.violations
            for v in violations:
                counts[v.kind] += 1
        table = self._collections
        if decision.reset:
            table.clear()
        for gid, collection in decision.declare:
            table[gid] = collection
        if decision.drop is not None:
            table.pop(decision.drop, None)
        to = decision.to
        if len(to) == 1:  # most commands (every peek): no generator to build the one delivery
            return Routing(((to[0], command),), violations)
        return Routing(tuple((runtime, command) for runtime in to), violations)

    def screen(self, runtime: Runtime, response: ComputeResponse) -> Violation | None:
        """`None` if `response` from `runtime` is forwarded; otherwise the violation it commits,
        and it is dropped (raises `ProtocolViolation` instead in strict mode).

        Only the owner of a collection reports its frontiers: always maintenance; interactive
        only for transient ids. The filter keys on transience, not on the table, because a
        collection's final (empty) reports arrive after its drop removed it from the table;
        gating on the table would lose them and the controller would never release the read
        holds the collection had on its inputs.
        """
        if runtime is INTERACTIVE and type(response) is Frontiers and not response.id.is_transient:
            violation = Violation(
                ViolationKind.FOREIGN_FRONTIERS,
                response.id,
                f"Frontiers from the interactive runtime for non-transient collection "
                f"{response.id}",
            )
            if self.strict:
                raise ProtocolViolation(violation, response)
            self.violations[violation.kind] += 1
            return violation
        return None
