"""The wire codec: exact round trips, the wire shape of every message, and a decoder that only
ever raises `DecodeError` whatever bytes it is given."""

import contextlib
from typing import Any
from uuid import UUID

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from twofold.protocol import (
    AllowCompaction,
    ComputeCommand,
    ComputeResponse,
    CreateDataflow,
    DataflowDescription,
    DecodeError,
    Frontier,
    Frontiers,
    GlobalId,
    Hello,
    InitializationComplete,
    Peek,
    Schedule,
    Status,
)
from twofold.protocol.codec import decode_command, decode_response, encode
from twofold.testing.profiles import examples
from twofold.testing.strategies import commands, responses

ROUND_TRIP = settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=examples(150), suppress_health_check=[HealthCheck.too_slow])


@ROUND_TRIP
@given(commands())
def test_commands_round_trip(cmd: ComputeCommand) -> None:
    data = encode(cmd)
    back = decode_command(data)
    assert back == cmd
    assert type(back) is type(cmd)
    # Byte-stable too: equality alone would not notice 1 turning into 1.0 or True.
    assert encode(back) == data


@ROUND_TRIP
@given(responses())
def test_responses_round_trip(resp: ComputeResponse) -> None:
    data = encode(resp)
    back = decode_response(data)
    assert back == resp
    assert type(back) is type(resp)
    assert encode(back) == data


def _check_wire_shape(value: Any, wire: Any) -> None:
    """Walk a protocol value and its generic msgpack decoding side by side."""
    if isinstance(value, GlobalId):
        assert wire == str(value)
    elif isinstance(value, Frontier):
        assert isinstance(wire, list) and len(wire) <= 1
        assert all(type(t) is int for t in wire)
        assert wire == value.to_wire()
    elif isinstance(value, msgspec.Struct):
        assert isinstance(wire, dict)
        cfg = value.__struct_config__
        if cfg.tag is not None:
            assert cfg.tag_field == "type"
            assert wire["type"] == type(value).__name__
        for field in value.__struct_fields__:
            _check_wire_shape(getattr(value, field), wire[field])
        assert set(wire) - {"type"} == set(value.__struct_fields__)
    elif isinstance(value, dict):
        assert isinstance(wire, dict) and len(wire) == len(value)
        for k, v in value.items():
            wk = str(k) if isinstance(k, GlobalId) else k
            _check_wire_shape(v, wire[wk])
    elif isinstance(value, list | tuple):
        assert isinstance(wire, list) and len(wire) == len(value)
        for v, w in zip(value, wire, strict=True):
            _check_wire_shape(v, w)
    elif isinstance(value, UUID):
        assert wire == value.bytes
    else:
        assert type(wire) is type(value) and wire == value


@settings(max_examples=examples(60))
@given(st.one_of(commands(), responses()))
def test_wire_shape(msg: ComputeCommand | ComputeResponse) -> None:
    wire = msgspec.msgpack.decode(encode(msg))
    _check_wire_shape(msg, wire)


def test_wire_shape_example() -> None:
    wire = msgspec.msgpack.decode(
        encode(AllowCompaction(GlobalId.introspection(3), Frontier.at(12)))
    )
    assert wire == {"type": "AllowCompaction", "id": "si3", "frontier": [12]}
    wire = msgspec.msgpack.decode(encode(Frontiers(GlobalId.user(1), Frontier.empty())))
    assert wire == {
        "type": "Frontiers",
        "id": "u1",
        "write_frontier": [],
        "input_frontier": None,
        "output_frontier": None,
    }


def test_encode_refuses_non_protocol_values() -> None:
    with pytest.raises(TypeError, match="protocol value"):
        encode({"type": "Status"})


def _decode_all(data: bytes) -> None:
    """Both decoders must either succeed or raise `DecodeError`; anything else fails the test."""
    for decode in (decode_command, decode_response):
        with contextlib.suppress(DecodeError):
            decode(data)


@FUZZ
@given(st.binary(max_size=200))
@example(b"")
@example(b"\xc1")  # a never-used msgpack byte
@example(b"\xdd\xff\xff\xff\xff")  # an array claiming 4G elements
@example(b"\xdf\xff\xff\xff\xff")  # a map claiming 4G entries
@example(b"\xc6\xff\xff\xff\xff")  # a bin claiming 4 GiB
def test_random_bytes_only_raise_decode_error(data: bytes) -> None:
    _decode_all(data)


@FUZZ
@given(st.one_of(commands(), responses()), st.data())
def test_truncations_and_mutations_only_raise_decode_error(
    msg: ComputeCommand | ComputeResponse, data: st.DataObject
) -> None:
    payload = encode(msg)
    for cut in range(len(payload)):
        with pytest.raises(DecodeError):
            decode_command(payload[:cut])
        with pytest.raises(DecodeError):
            decode_response(payload[:cut])
    for _ in range(8):
        i = data.draw(st.integers(0, len(payload) - 1))
        b = data.draw(st.integers(0, 255))
        _decode_all(payload[:i] + bytes([b]) + payload[i + 1 :])


def test_every_truncation_of_a_large_dataflow_is_refused() -> None:
    df = DataflowDescription("big", as_of=Frontier.at(1), until=Frontier.at(2))
    payload = encode(CreateDataflow(df))
    assert decode_command(payload) == CreateDataflow(df)
    for cut in range(len(payload)):
        with pytest.raises(DecodeError):
            decode_command(payload[:cut])


def test_oversized_input_is_refused() -> None:
    payload = encode(Status("x" * 100))
    assert decode_response(payload, max_size=len(payload)) == Status("x" * 100)
    with pytest.raises(DecodeError, match="exceeds the limit"):
        decode_response(payload, max_size=len(payload) - 1)
    with pytest.raises(DecodeError, match="exceeds the limit"):
        decode_command(encode(Hello(UUID(int=1))), max_size=3)


def test_non_bytes_input_is_refused() -> None:
    with pytest.raises(DecodeError):
        decode_command("hello")  # type: ignore[arg-type]
    assert decode_command(bytearray(encode(InitializationComplete()))) == InitializationComplete()
    assert decode_command(memoryview(encode(InitializationComplete()))) == InitializationComplete()


@settings(max_examples=examples(40))
@given(commands())
def test_a_command_is_not_a_response(cmd: ComputeCommand) -> None:
    with pytest.raises(DecodeError):
        decode_response(encode(cmd))


@settings(max_examples=examples(40))
@given(responses())
def test_a_response_is_not_a_command(resp: ComputeResponse) -> None:
    with pytest.raises(DecodeError):
        decode_command(encode(resp))


@pytest.mark.parametrize(
    "wire",
    [
        {"type": "Nope"},
        {"type": "Schedule"},  # missing field
        {"type": "Schedule", "id": "u1", "extra": 1},  # unknown field
        {"type": "Schedule", "id": "x1"},  # bad GlobalId string
        {"type": "Schedule", "id": 1},  # GlobalId not a string
        {"type": "AllowCompaction", "id": "u1", "frontier": [1, 2]},
        {"type": "AllowCompaction", "id": "u1", "frontier": [-1]},
        {"type": "AllowCompaction", "id": "u1", "frontier": [True]},
        {"type": "AllowCompaction", "id": "u1", "frontier": [1.5]},
        {"type": "AllowCompaction", "id": "u1", "frontier": 3},
        {"type": "CancelPeek", "uuid": b"short"},
        {"id": "u1"},  # no tag
        [1, 2, 3],
        "Schedule",
    ],
)
def test_invalid_messages_raise_decode_error(wire: Any) -> None:
    with pytest.raises(DecodeError):
        decode_command(msgspec.msgpack.encode(wire))


def _peek(**extra: Any) -> dict[str, Any]:
    return {
        "type": "Peek",
        "uuid": UUID(int=7).bytes,
        "target": {"type": "IndexTarget", "id": "t1"},
        "timestamp": 3,
        **extra,
    }


@pytest.mark.parametrize(
    "extra",
    [
        {"literal_constraints": []},  # present but empty
        {"literal_constraints": [[{"a": 1}]]},  # non-scalar in a row
        {"literal_constraints": [[[1]]]},
        {"mfp": {"filter": [{"type": "Call", "func": "not", "args": []}]}},  # arity
        {"mfp": {"filter": [{"type": "Call", "func": "nope", "args": []}]}},
        {"mfp": {"map": [{"type": "Literal", "value": [1]}]}},
        {"mfp": {"map": [{"type": "Column", "index": -1}]}},
        {"finishing": {"offset": -1}},
        {"target": {"type": "Get", "id": "u1"}},  # a Plan is not a target
    ],
)
def test_structurally_invalid_values_raise_decode_error(extra: dict[str, Any]) -> None:
    assert isinstance(decode_command(msgspec.msgpack.encode(_peek())), Peek)
    with pytest.raises(DecodeError):
        decode_command(msgspec.msgpack.encode(_peek(**extra)))


HOLE = "\x00hole\x00"


def _splice(wire: Any, inner: bytes) -> bytes:
    """Encode `wire` with the one `HOLE` string in it replaced by the raw msgpack `inner`."""
    data = msgspec.msgpack.encode(wire)
    hole = msgspec.msgpack.encode(HOLE)
    assert data.count(hole) == 1
    return data.replace(hole, inner)


def _nested_negates(depth: int) -> bytes:
    """The msgpack of `Negate(Negate(...Get(u1)))`, `depth` levels deep."""
    get = msgspec.msgpack.encode({"type": "Get", "id": "u1"})
    # "input" is the last key, so cutting the hole out leaves the prefix of one level.
    level = _splice({"type": "Negate", "input": HOLE}, b"")
    return level * depth + get


def _create_dataflow_with_plan(plan: bytes) -> bytes:
    wire = {
        "type": "CreateDataflow",
        "dataflow": {"debug_name": "deep", "objects_to_build": [{"id": "u2", "plan": HOLE}]},
    }
    return _splice(wire, plan)


def test_moderate_nesting_decodes() -> None:
    cmd = decode_command(_create_dataflow_with_plan(_nested_negates(50)))
    assert isinstance(cmd, CreateDataflow)


@pytest.mark.parametrize("depth", [2_000, 200_000])
def test_deep_nesting_is_refused_without_crashing(depth: int) -> None:
    with pytest.raises(DecodeError):
        decode_command(_create_dataflow_with_plan(_nested_negates(depth)))


@pytest.mark.parametrize("depth", [2_000, 200_000])
def test_deeply_nested_row_values_are_refused_without_crashing(depth: int) -> None:
    value = b"\x91" * depth + b"\x01"
    with pytest.raises(DecodeError):
        decode_command(_splice(_peek(literal_constraints=[HOLE]), value))
    with pytest.raises(DecodeError):
        decode_response(_splice({"type": "PeekResponse", "uuid": bytes(16), "result": HOLE}, value))
    with pytest.raises(DecodeError):
        decode_command(_splice(_peek(mfp={"map": [{"type": "Literal", "value": HOLE}]}), value))


def test_the_type_key_may_come_anywhere_in_the_map() -> None:
    # Other encoders need not put "type" first.
    wire = msgspec.msgpack.encode({"id": "u1", "type": "Schedule"})
    assert decode_command(wire) == Schedule(GlobalId.user(1))


_ID_TEXTS = ["u1", "u01", "si2", "s0", "t18446744073709551615", "x1", "t18446744073709551616"]
_ID_TEXTS += ["u", "U1", "u-1"]


@given(st.lists(st.sampled_from(_ID_TEXTS), max_size=12))
@settings(max_examples=examples(50))
def test_decoded_ids_do_not_depend_on_what_was_decoded_before(ids: list[str]) -> None:
    """Decoded ids are cached by their string: a valid id decodes to the id it spells whatever
    came before it, and an invalid one is refused however often valid ones were decoded."""
    for text in ids:
        wire = msgspec.msgpack.encode({"type": "Schedule", "id": text})
        try:
            expected = GlobalId.parse(text)
        except ValueError:
            with pytest.raises(DecodeError):
                decode_command(wire)
            continue
        cmd = decode_command(wire)
        assert isinstance(cmd, Schedule) and cmd.id == expected and str(cmd.id) == text


def test_the_id_cache_is_bounded() -> None:
    from twofold.protocol import codec

    for n in range(codec._IDS_MAX + 10):
        cmd = decode_command(msgspec.msgpack.encode({"type": "Schedule", "id": f"u{n}"}))
        assert isinstance(cmd, Schedule) and cmd.id == GlobalId.user(n)
    assert len(codec._IDS) <= codec._IDS_MAX
