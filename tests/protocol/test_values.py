"""Value semantics of protocol types: frozen, equal by value, and validated on construction
with errors that name the problem."""

from typing import Any, get_args
from uuid import UUID

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.protocol import (
    Aggregate,
    Call,
    Column,
    ColumnType,
    ComputeCommand,
    ComputeResponse,
    Constant,
    DecodeError,
    Frontier,
    Get,
    GlobalId,
    IndexTarget,
    Join,
    Literal,
    MapFilterProject,
    Mfp,
    OrderKey,
    Peek,
    PeekResponse,
    PeekRows,
    RelationDesc,
    RowSetFinishing,
    Schedule,
    SubscribeBatch,
    TopK,
    UnionAll,
)
from twofold.protocol.codec import decode_command, decode_response, encode
from twofold.testing.profiles import examples
from twofold.testing.strategies import commands, responses

U1 = GlobalId.user(1)
UUID1 = UUID(int=1)
COMMAND_TYPES = set(get_args(ComputeCommand))


def get() -> Get:
    return Get(U1)


@settings(max_examples=examples(50))
@given(st.one_of(commands(), responses()))
def test_every_message_is_frozen(msg: ComputeCommand | ComputeResponse) -> None:
    field = msg.__struct_fields__[0] if msg.__struct_fields__ else "anything"
    with pytest.raises(AttributeError):
        setattr(msg, field, None)


@settings(max_examples=examples(50))
@given(st.one_of(commands(), responses()))
def test_equal_by_value(msg: ComputeCommand | ComputeResponse) -> None:
    data = encode(msg)
    copy = decode_command(data) if msg.__class__ in COMMAND_TYPES else decode_response(data)
    assert copy is not msg and copy == msg
    # A different variant with the same fields is not equal.
    assert Schedule(U1) != IndexTarget(U1)  # type: ignore[comparison-overlap]


def test_nested_values_compare_structurally() -> None:
    a = Mfp(get(), filter=[Call("eq", [Column(0), Literal(1)])])
    b = Mfp(get(), filter=[Call("eq", [Column(0), Literal(1)])])
    c = Mfp(get(), filter=[Call("eq", [Column(0), Literal(2)])])
    assert a == b and a != c


def test_hashable_where_fields_are() -> None:
    assert hash(Schedule(U1)) == hash(Schedule(GlobalId.user(1)))
    assert len({IndexTarget(U1), IndexTarget(GlobalId.parse("u1"))}) == 1


# --- construction-time validation ------------------------------------------------------------


@pytest.mark.parametrize(
    ("func", "n"), [("not", 0), ("not", 2), ("eq", 1), ("eq", 3), ("if", 2), ("coalesce", 0)]
)
def test_call_arity(func: str, n: int) -> None:
    with pytest.raises(ValueError, match=rf"{func} takes .*argument"):
        Call(func, [Literal(1)] * n)  # type: ignore[arg-type]


def test_call_accepts_correct_arities() -> None:
    assert Call("if", [Literal(True), Literal(1), Literal(2)]).func == "if"
    assert len(Call("coalesce", [Literal(None)] * 5).args) == 5


def test_call_unknown_function() -> None:
    with pytest.raises(ValueError, match="unknown function 'nope'"):
        Call("nope", [])  # type: ignore[arg-type]


def test_relation_desc_lengths() -> None:
    with pytest.raises(ValueError, match="2 names but 1 types"):
        RelationDesc(["a", "b"], [ColumnType("int")])
    d = RelationDesc(["a", "b"], [ColumnType("int"), ColumnType("str", nullable=False)])
    assert d.arity == 2 and d.index_of("b") == 1
    with pytest.raises(KeyError, match="no column 'c'"):
        d.index_of("c")


def test_join_key_lengths() -> None:
    with pytest.raises(ValueError, match="Join keys differ in length"):
        Join(get(), get(), [0, 1], [0])
    with pytest.raises(ValueError, match=r"Join\.right_key"):
        Join(get(), get(), [0], [-1])


@pytest.mark.parametrize("func", ["sum", "min", "max"])
def test_aggregate_needs_a_column(func: str) -> None:
    with pytest.raises(ValueError, match=f"aggregate {func} needs a column"):
        Aggregate(func)  # type: ignore[arg-type]
    assert Aggregate(func, 0).column == 0  # type: ignore[arg-type]


def test_count_may_go_without_a_column() -> None:
    assert Aggregate("count").column is None
    with pytest.raises(ValueError, match=r"Aggregate\.column"):
        Aggregate("count", -1)


def test_peek_literal_constraints_never_empty() -> None:
    with pytest.raises(ValueError, match="literal_constraints must be None or non-empty"):
        Peek(UUID1, IndexTarget(U1), 0, literal_constraints=[])
    assert Peek(UUID1, IndexTarget(U1), 0, literal_constraints=[[1]]).literal_constraints


@pytest.mark.parametrize("t", [-1, 2**64])
def test_peek_timestamp_range(t: int) -> None:
    with pytest.raises(ValueError, match="Peek timestamp"):
        Peek(UUID1, IndexTarget(U1), t)


@pytest.mark.parametrize("bad", [[1], {"a": 1}, (1,), object(), Frontier.at(1), U1])
def test_non_scalars_in_rows_are_refused(bad: object) -> None:
    name = type(bad).__name__
    with pytest.raises(TypeError, match=f"rows may hold only scalars, found {name}"):
        Constant([([1, bad], 1)])
    with pytest.raises(TypeError, match=r"PeekRows\.rows"):
        PeekRows([([bad], 1)])
    with pytest.raises(TypeError, match=r"SubscribeBatch\.updates"):
        SubscribeBatch(Frontier.at(0), Frontier.at(1), updates=[(0, [bad], 1)])
    with pytest.raises(TypeError, match=r"Peek\.literal_constraints"):
        Peek(UUID1, IndexTarget(U1), 0, literal_constraints=[[bad]])
    with pytest.raises(TypeError, match=r"Literal\.value"):
        Literal(bad)


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1])
def test_ints_outside_int64_are_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="outside the 64-bit signed range"):
        Literal(bad)
    with pytest.raises(ValueError, match=rf"PeekRows\.rows: int {bad} is outside"):
        PeekRows([([1, "x", bad], 1)])
    with pytest.raises(ValueError, match=r"Constant\.rows"):
        Constant([([bad], 1)])


def test_int64_edges_and_all_scalar_types_are_accepted() -> None:
    row = [None, True, -(2**63), 2**63 - 1, 1.5, "s", b"b"]
    assert PeekRows([(row, 1)]).rows[0][0] == row
    resp = PeekResponse(UUID1, PeekRows([(row, 1)]))
    assert decode_response(encode(resp)) == resp


def test_out_of_range_ints_on_the_wire_are_a_decode_error() -> None:
    wire = {"type": "PeekResponse", "uuid": bytes(16), "result": {"type": "PeekRows",
            "rows": [[[2**64 - 1], 1]]}}  # fmt: skip
    with pytest.raises(DecodeError, match="64-bit"):
        decode_response(msgspec.msgpack.encode(wire))


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: Column(-1), "Column index"),
        (lambda: OrderKey(-1), "OrderKey.column"),
        (lambda: MapFilterProject(project=[0, -2]), "MapFilterProject.project"),
        (lambda: RowSetFinishing(offset=-1), "offset"),
        (lambda: RowSetFinishing(limit=-1), "limit"),
        (lambda: TopK(get(), [], [], offset=-1), "TopK.offset"),
        (lambda: TopK(get(), [], [], limit=-1), "TopK.limit"),
        (lambda: UnionAll([]), "at least one input"),
        (lambda: Mfp(get(), project=[-1]), "Mfp.project"),
    ],
)
def test_structural_validation(build: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build()


def test_nan_is_not_equal_to_itself() -> None:
    # Why the strategies never generate NaN: equality of values holding it fails.
    assert Literal(float("nan")) != Literal(float("nan"))


@pytest.mark.parametrize("t", [-1, 2**64])
def test_subscribe_batch_times_are_timestamps(t: int) -> None:
    with pytest.raises(ValueError, match=rf"SubscribeBatch\.updates: time {t} is outside"):
        SubscribeBatch(Frontier.at(0), Frontier.empty(), updates=[(0, [1], 1), (t, [2], 1)])
    assert SubscribeBatch(Frontier.at(0), Frontier.empty(), updates=[(2**64 - 1, [1], 1)])
