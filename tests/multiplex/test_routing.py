"""The pure routing table (`twofold.multiplex.routing.Router`): every rule of the table, the
broadcast, eviction, `Hello`, the frontier filter, and every violation in strict and lenient
mode."""

from __future__ import annotations

import pytest

from twofold.multiplex import Collection, ProtocolViolation, Router, Runtime, ViolationKind
from twofold.protocol import (
    AllowCompaction,
    AllowWrites,
    CancelPeek,
    ComputeCommand,
    ComputeParameters,
    CopyToResponse,
    CopyToRowCount,
    CreateDataflow,
    DataflowDescription,
    Frontier,
    Frontiers,
    GlobalId,
    Hello,
    IndexTarget,
    InitializationComplete,
    Peek,
    PeekResponse,
    PeekRows,
    Schedule,
    Status,
    StorageTarget,
    SubscribeBatch,
    SubscribeResponse,
    UpdateConfiguration,
)

from .fakes import (
    copy_to_dataflow,
    index_export,
    instance,
    maintained_index,
    materialized_view,
    new_uuid,
    peek_dataflow,
    sink,
    subscribe_dataflow,
)

MAINT, INTER = Runtime.MAINTENANCE, Runtime.INTERACTIVE
U1, U2, U3 = GlobalId.user(1), GlobalId.user(2), GlobalId.user(3)
T1, T2 = GlobalId.transient(1), GlobalId.transient(2)
SI1, SI2 = GlobalId.introspection(1), GlobalId.introspection(2)
VK = ViolationKind
NO_VIOLATIONS = {"undeclared": 0, "declared_twice": 0, "peek_undeclared": 0, "foreign_frontiers": 0}


def targets(router: Router, command: ComputeCommand) -> list[Runtime]:
    """Route `command` and return where it went, checking it was delivered unmodified."""
    routing = router.route(command)
    assert all(delivered is command for _, delivered in routing.deliveries)
    return [runtime for runtime, _ in routing.deliveries]


def declared(*commands: ComputeCommand, strict: bool = True) -> Router:
    router = Router(strict=strict)
    for c in commands:
        router.route(c)
    return router


# -- lifecycle ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        Hello(new_uuid()),
        instance(),
        InitializationComplete(),
        UpdateConfiguration(ComputeParameters(max_result_size=10)),
    ],
    ids=lambda c: type(c).__name__,
)
def test_lifecycle_goes_to_maintenance_then_interactive(command: ComputeCommand) -> None:
    assert targets(Router(strict=True), command) == [MAINT, INTER]


def test_create_instance_declares_its_logs_as_published_maintained() -> None:
    router = declared(instance(SI1, SI2))
    assert router.collections == {SI1: Collection(MAINT, True), SI2: Collection(MAINT, True)}
    # ... so their compactions reach interactive too.
    assert targets(router, AllowCompaction(SI1, Frontier.at(3))) == [MAINT, INTER]


def test_hello_clears_the_table() -> None:
    router = declared(instance(SI1), maintained_index(U1), peek_dataflow(T1))
    assert set(router.collections) == {SI1, U1, T1}
    assert targets(router, Hello(new_uuid())) == [MAINT, INTER]
    assert router.collections == {}
    # The replayed creates redeclare the same ids without a "declared twice".
    router.route(instance(SI1))
    router.route(maintained_index(U1))
    router.route(peek_dataflow(T1))
    assert router.violations == NO_VIOLATIONS


# -- dataflows ------------------------------------------------------------------------------


def test_peek_dataflow_goes_to_interactive_and_owns_its_exports() -> None:
    router = Router(strict=True)
    assert targets(router, peek_dataflow(T1, T2)) == [INTER]
    assert router.collections == {T1: Collection(INTER, False), T2: Collection(INTER, False)}
    for command in (Schedule(T1), AllowWrites(T2), AllowCompaction(T1, Frontier.at(5))):
        assert targets(router, command) == [INTER]


def test_peek_dataflow_at_max_time_with_empty_until_goes_to_interactive() -> None:
    df = CreateDataflow(
        DataflowDescription(
            "max", index_exports={T1: index_export(U1)}, as_of=Frontier.at(2**64 - 1)
        )
    )
    assert targets(Router(strict=True), df) == [INTER]


def test_maintained_index_goes_to_maintenance_published() -> None:
    router = Router(strict=True)
    assert targets(router, maintained_index(U1, U2)) == [MAINT]
    assert router.collections == {U1: Collection(MAINT, True), U2: Collection(MAINT, True)}
    assert targets(router, Schedule(U1)) == [MAINT]
    assert targets(router, AllowWrites(U2)) == [MAINT]


def test_materialized_view_is_maintained_but_not_published() -> None:
    router = declared(materialized_view(U3))
    assert router.collections == {U3: Collection(MAINT, False)}
    assert targets(router, AllowCompaction(U3, Frontier.at(4))) == [MAINT]


def test_mixed_exports_publish_only_the_index_exports() -> None:
    df = CreateDataflow(
        DataflowDescription(
            "mixed",
            index_exports={U1: index_export(GlobalId.system(1))},
            sink_exports={U2: sink(materialized_view(U2).dataflow.sink_exports[U2].connection)},
            as_of=Frontier.at(0),
        )
    )
    router = declared(df)
    assert router.collections == {U1: Collection(MAINT, True), U2: Collection(MAINT, False)}


@pytest.mark.parametrize(
    "dataflow",
    [
        subscribe_dataflow(T1),  # transient and single-time, but a subscribe
        subscribe_dataflow(T1, single_time=False),
        copy_to_dataflow(T1),  # transient and single-time, but a copy-to
        # transient but not single-time
        CreateDataflow(
            DataflowDescription("live", index_exports={T1: index_export(U1)}, as_of=Frontier.at(3))
        ),
        # single-time but durable (a REFRESH AT view has a finite until too)
        CreateDataflow(
            DataflowDescription(
                "refresh",
                index_exports={U1: index_export(U2)},
                as_of=Frontier.at(3),
                until=Frontier.at(4),
            )
        ),
        # a mixed dataflow (one transient, one durable export) is maintained: the safe default
        CreateDataflow(
            DataflowDescription(
                "mixed",
                index_exports={T1: index_export(U2), U1: index_export(U2)},
                as_of=Frontier.at(3),
                until=Frontier.at(4),
            )
        ),
    ],
    ids=["subscribe", "subscribe-live", "copy-to", "not-single-time", "durable", "mixed"],
)
def test_other_dataflows_go_to_maintenance(dataflow: CreateDataflow) -> None:
    router = Router(strict=True)
    assert targets(router, dataflow) == [MAINT]
    for gid in dataflow.dataflow.export_ids():
        assert router.collections[gid].runtime is MAINT
        assert targets(router, Schedule(gid)) == [MAINT]


# -- compaction -----------------------------------------------------------------------------


def test_compaction_of_published_index_is_broadcast_unchanged() -> None:
    router = declared(maintained_index(U1))
    command = AllowCompaction(U1, Frontier.at(7))
    routing = router.route(command)
    assert routing.deliveries == ((MAINT, command), (INTER, command))
    assert all(delivered is command for _, delivered in routing.deliveries)
    assert routing.deliveries[1][1].frontier == Frontier.at(7)  # never capped


def test_compaction_of_interactive_collection_is_not_broadcast() -> None:
    router = declared(peek_dataflow(T1))
    assert targets(router, AllowCompaction(T1, Frontier.at(6))) == [INTER]


def test_compaction_of_unpublished_maintained_collection_is_not_broadcast() -> None:
    router = declared(subscribe_dataflow(T1, single_time=False))
    assert targets(router, AllowCompaction(T1, Frontier.at(6))) == [MAINT]


@pytest.mark.parametrize(
    ("create", "gid", "expected"),
    [
        (maintained_index(U1), U1, [MAINT, INTER]),
        (materialized_view(U1), U1, [MAINT]),
        (peek_dataflow(T1), T1, [INTER]),
        (instance(SI1), SI1, [MAINT, INTER]),
    ],
    ids=["published-index", "mv", "peek-dataflow", "log"],
)
def test_empty_compaction_is_forwarded_then_evicts(
    create: ComputeCommand, gid: GlobalId, expected: list[Runtime]
) -> None:
    router = declared(create)
    assert targets(router, AllowCompaction(gid, Frontier.empty())) == expected
    assert gid not in router.collections
    # A later command naming the dropped id is a violation.
    with pytest.raises(ProtocolViolation, match="undeclared or dropped"):
        router.route(Schedule(gid))


def test_non_empty_compaction_keeps_the_collection() -> None:
    router = declared(maintained_index(U1))
    router.route(AllowCompaction(U1, Frontier.at(3)))
    router.route(AllowCompaction(U1, Frontier.at(3)))  # repeated: still fine
    assert U1 in router.collections


# -- peeks ----------------------------------------------------------------------------------


def test_peeks_and_cancels_go_to_interactive() -> None:
    router = declared(maintained_index(U1), peek_dataflow(T1))
    assert targets(router, Peek(new_uuid(), IndexTarget(U1), 3)) == [INTER]
    assert targets(router, Peek(new_uuid(), IndexTarget(T1), 5)) == [INTER]
    assert targets(router, CancelPeek(new_uuid())) == [INTER]  # no per-peek state: any uuid


def test_storage_peek_goes_to_interactive_unchecked() -> None:
    router = Router(strict=True)  # storage ids are not compute collections
    assert targets(router, Peek(new_uuid(), StorageTarget(U3, "shard"), 3)) == [INTER]
    assert router.violations == NO_VIOLATIONS


def test_not_a_command_is_a_type_error() -> None:
    router = Router()
    with pytest.raises(TypeError, match="not a ComputeCommand: Status"):
        router.route(Status("x"))  # type: ignore[arg-type]


# -- violations -----------------------------------------------------------------------------

VIOLATIONS: list[tuple[str, list[ComputeCommand], ComputeCommand, ViolationKind, GlobalId]] = [
    ("schedule-undeclared", [], Schedule(U1), VK.UNDECLARED, U1),
    ("allow-writes-undeclared", [], AllowWrites(U1), VK.UNDECLARED, U1),
    ("compaction-undeclared", [], AllowCompaction(U1, Frontier.at(1)), VK.UNDECLARED, U1),
    (
        "schedule-dropped",
        [maintained_index(U1), AllowCompaction(U1, Frontier.empty())],
        Schedule(U1),
        VK.UNDECLARED,
        U1,
    ),
    (
        "compaction-dropped",
        [maintained_index(U1), AllowCompaction(U1, Frontier.empty())],
        AllowCompaction(U1, Frontier.empty()),
        VK.UNDECLARED,
        U1,
    ),
    ("dataflow-twice", [maintained_index(U1)], maintained_index(U1), VK.DECLARED_TWICE, U1),
    ("instance-twice", [instance(SI1)], instance(SI1), VK.DECLARED_TWICE, SI1),
    ("instance-repeats-id", [], instance(SI1, SI1), VK.DECLARED_TWICE, SI1),
    ("log-as-dataflow", [instance(SI1)], maintained_index(SI1), VK.DECLARED_TWICE, SI1),
    ("peek-undeclared", [], Peek(new_uuid(), IndexTarget(U2), 1), VK.PEEK_UNDECLARED, U2),
    (
        "peek-dropped",
        [peek_dataflow(T1), AllowCompaction(T1, Frontier.empty())],
        Peek(new_uuid(), IndexTarget(T1), 5),
        VK.PEEK_UNDECLARED,
        T1,
    ),
]


@pytest.mark.parametrize(
    ("before", "command", "kind", "gid"),
    [v[1:] for v in VIOLATIONS],
    ids=[v[0] for v in VIOLATIONS],
)
def test_strict_violation_raises_before_the_table_changes(
    before: list[ComputeCommand], command: ComputeCommand, kind: ViolationKind, gid: GlobalId
) -> None:
    router = declared(*before)
    table = dict(router.collections)
    with pytest.raises(ProtocolViolation) as raised:
        router.route(command)
    assert raised.value.kind is kind
    assert raised.value.id == gid
    assert raised.value.subject is command
    assert type(command).__name__ in str(raised.value) and str(gid) in str(raised.value)
    assert dict(router.collections) == table
    assert router.violations == NO_VIOLATIONS


@pytest.mark.parametrize(
    ("before", "command", "kind", "gid"),
    [v[1:] for v in VIOLATIONS],
    ids=[v[0] for v in VIOLATIONS],
)
def test_lenient_violation_is_counted_and_reported(
    before: list[ComputeCommand], command: ComputeCommand, kind: ViolationKind, gid: GlobalId
) -> None:
    router = declared(*before, strict=False)
    routing = router.route(command)
    assert [(v.kind, v.id) for v in routing.violations] == [(kind, gid)]
    assert router.violations == {**NO_VIOLATIONS, kind.value: 1}


@pytest.mark.parametrize(
    "command",
    [Schedule(U1), AllowWrites(U1), AllowCompaction(U1, Frontier.at(2))],
    ids=lambda c: type(c).__name__,
)
def test_lenient_unknown_id_goes_to_maintenance_only(command: ComputeCommand) -> None:
    assert targets(Router(strict=False), command) == [MAINT]


def test_lenient_compaction_of_dropped_published_index_is_not_broadcast() -> None:
    router = declared(maintained_index(U1), AllowCompaction(U1, Frontier.empty()), strict=False)
    assert targets(router, AllowCompaction(U1, Frontier.empty())) == [MAINT]
    assert router.violations["undeclared"] == 1


def test_lenient_repeated_declaration_routes_as_usual_and_replaces_the_entry() -> None:
    router = declared(peek_dataflow(T1), strict=False)
    assert router.collections[T1] == Collection(INTER, False)
    # Redeclared by a subscribe: routed to maintenance, and the table now says maintenance.
    assert targets(router, subscribe_dataflow(T1)) == [MAINT]
    assert router.collections[T1] == Collection(MAINT, False)
    assert targets(router, Schedule(T1)) == [MAINT]
    assert router.violations["declared_twice"] == 1


def test_lenient_peek_on_undeclared_index_still_goes_to_interactive() -> None:
    router = Router(strict=False)
    assert targets(router, Peek(new_uuid(), IndexTarget(U1), 1)) == [INTER]
    assert router.violations["peek_undeclared"] == 1


def test_violation_counts_survive_hello() -> None:
    router = Router(strict=False)
    router.route(Schedule(U1))
    router.route(Hello(new_uuid()))
    router.route(Schedule(U1))
    assert router.violations["undeclared"] == 2


# -- response screening ---------------------------------------------------------------------

FORWARDED = [
    (MAINT, Frontiers(U1, write_frontier=Frontier.at(3))),
    (MAINT, Frontiers(SI1, output_frontier=Frontier.empty())),
    (MAINT, Frontiers(T1, write_frontier=Frontier.at(3))),
    (INTER, Frontiers(T1, write_frontier=Frontier.at(3))),
    (INTER, PeekResponse(new_uuid(), PeekRows([([1], 1)]))),
    (MAINT, PeekResponse(new_uuid(), PeekRows([]))),
    (MAINT, SubscribeResponse(T2, SubscribeBatch(Frontier.at(0), Frontier.at(1), []))),
    (INTER, SubscribeResponse(T2, SubscribeBatch(Frontier.at(0), Frontier.at(1), []))),
    (INTER, CopyToResponse(T2, CopyToRowCount(3))),
    (MAINT, Status("hello")),
    (INTER, Status("hello")),
]


@pytest.mark.parametrize(("runtime", "response"), FORWARDED)
@pytest.mark.parametrize("strict", [True, False])
def test_screen_forwards_owned_responses(runtime: Runtime, response: object, strict: bool) -> None:
    router = Router(strict=strict)  # nothing declared: forwarding never needs the table
    assert router.screen(runtime, response) is None  # type: ignore[arg-type]
    assert router.violations == NO_VIOLATIONS


def test_screen_forwards_final_transient_frontiers_after_the_drop() -> None:
    router = declared(peek_dataflow(T1), AllowCompaction(T1, Frontier.empty()))
    assert T1 not in router.collections
    final = Frontiers(T1, Frontier.empty(), Frontier.empty(), Frontier.empty())
    assert router.screen(INTER, final) is None


@pytest.mark.parametrize("gid", [U1, SI1, GlobalId.system(4)])
def test_screen_strict_raises_on_foreign_interactive_frontiers(gid: GlobalId) -> None:
    router = declared(instance(SI1), maintained_index(U1))
    report = Frontiers(gid, write_frontier=Frontier.at(1))
    with pytest.raises(ProtocolViolation, match=f"non-transient collection {gid}") as raised:
        router.screen(INTER, report)
    assert raised.value.kind is ViolationKind.FOREIGN_FRONTIERS
    assert raised.value.subject is report and "Frontiers" in str(raised.value)


def test_screen_lenient_drops_and_counts_foreign_interactive_frontiers() -> None:
    router = Router(strict=False)
    violation = router.screen(INTER, Frontiers(U1, write_frontier=Frontier.at(1)))
    assert violation is not None and violation.kind is ViolationKind.FOREIGN_FRONTIERS
    assert router.violations == {**NO_VIOLATIONS, "foreign_frontiers": 1}


def test_the_table_is_read_only_from_outside() -> None:
    router = declared(maintained_index(U1))
    with pytest.raises(TypeError):
        router.collections[U2] = Collection(MAINT, True)  # type: ignore[index]
    assert U2 not in router.collections
