"""Model-based property test of the pure `Router` over random, often invalid, command histories.

Commands name ids from a small pool, so undeclared, dropped and twice-declared ids are common.
An independent model of the table (`model.py`) predicts, for every command, the runtimes it reaches
and the violations it commits. Lenient mode must follow the model exactly (including the
fallbacks); strict mode must raise exactly where the model sees a violation, with the table and
the counts untouched.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.multiplex import ProtocolViolation, Router, Runtime
from twofold.protocol import (
    AllowCompaction,
    AllowWrites,
    CancelPeek,
    ComputeCommand,
    Frontier,
    GlobalId,
    Hello,
    IndexTarget,
    InitializationComplete,
    Peek,
    Schedule,
    StorageTarget,
)
from twofold.testing.profiles import examples

from .fakes import instance, maintained_index, materialized_view, peek_dataflow, subscribe_dataflow
from .model import RoutingModel

MAINT, INTER = Runtime.MAINTENANCE, Runtime.INTERACTIVE
DURABLE = [GlobalId.user(1), GlobalId.user(2), GlobalId.introspection(1)]
TRANSIENT = [GlobalId.transient(1), GlobalId.transient(2)]
POOL = DURABLE + TRANSIENT

ids = st.sampled_from(POOL)
frontiers = st.one_of(st.just(Frontier.empty()), st.integers(0, 5).map(Frontier.at))
commands: st.SearchStrategy[ComputeCommand] = st.one_of(
    st.builds(Hello, st.uuids()),
    st.lists(st.sampled_from(DURABLE), max_size=2).map(lambda g: instance(*g)),
    st.just(InitializationComplete()),
    st.lists(st.sampled_from(DURABLE), min_size=1, max_size=2, unique=True).map(
        lambda g: maintained_index(*g)
    ),
    st.sampled_from(DURABLE).map(materialized_view),
    st.lists(st.sampled_from(TRANSIENT), min_size=1, max_size=2, unique=True).map(
        lambda g: peek_dataflow(*g)
    ),
    st.sampled_from(TRANSIENT).map(subscribe_dataflow),
    st.builds(Schedule, ids),
    st.builds(AllowWrites, ids),
    st.builds(AllowCompaction, ids, frontiers),
    st.builds(lambda u, g: Peek(u, IndexTarget(g), 1), st.uuids(), ids),
    st.builds(lambda u, g: Peek(u, StorageTarget(g, "s"), 1), st.uuids(), ids),
    st.builds(CancelPeek, st.uuids()),
)


@settings(max_examples=examples(300))
@given(history=st.lists(commands, max_size=30))
def test_lenient_router_follows_the_model(history: list[ComputeCommand]) -> None:
    router, model = Router(strict=False), RoutingModel()
    counts = dict.fromkeys(router.violations, 0)
    for command in history:
        to, kinds = model.route(command, apply=True)
        routing = router.route(command)
        assert [r for r, _ in routing.deliveries] == to
        assert all(c is command for _, c in routing.deliveries)
        assert [v.kind.value for v in routing.violations] == kinds
        for kind in kinds:
            counts[kind] += 1
        assert router.violations == counts
        assert {g: (c.runtime, c.published) for g, c in router.collections.items()} == model.live


@settings(max_examples=examples(300))
@given(history=st.lists(commands, max_size=30))
def test_strict_router_raises_exactly_on_violations_and_changes_nothing(
    history: list[ComputeCommand],
) -> None:
    router, model = Router(strict=True), RoutingModel()
    for command in history:
        to, kinds = model.route(command, apply=False)
        before = dict(router.collections)
        if kinds:
            try:
                router.route(command)
            except ProtocolViolation as violation:
                assert violation.kind.value == kinds[0]
                assert violation.subject is command
            else:
                raise AssertionError(f"{command!r} should have raised ({kinds})")
            assert dict(router.collections) == before
        else:
            routing = router.route(command)
            model.route(command, apply=True)
            assert [r for r, _ in routing.deliveries] == to
    assert set(router.violations.values()) == {0}
