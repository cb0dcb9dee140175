"""GlobalId: ordering (kind first, then number), parsing, transience, hashing, immutability."""

import itertools
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twofold.protocol import GlobalId, IdKind
from twofold.testing.strategies import global_ids, id_numbers

CONSTRUCTORS = {
    IdKind.SYSTEM: GlobalId.system,
    IdKind.INTROSPECTION: GlobalId.introspection,
    IdKind.USER: GlobalId.user,
    IdKind.TRANSIENT: GlobalId.transient,
}


def test_constructors_and_str() -> None:
    assert str(GlobalId.system(7)) == "s7"
    assert str(GlobalId.introspection(7)) == "si7"
    assert str(GlobalId.user(7)) == "u7"
    assert str(GlobalId.transient(7)) == "t7"
    assert GlobalId.user(7).kind is IdKind.USER and GlobalId.user(7).n == 7


def test_kind_order_is_system_introspection_user_transient() -> None:
    ids = [GlobalId.transient(0), GlobalId.user(1), GlobalId.introspection(2), GlobalId.system(3)]
    assert sorted(ids) == ids[::-1]
    # Kind dominates number.
    assert GlobalId.system(10**9) < GlobalId.introspection(0) < GlobalId.user(0)
    assert GlobalId.user(10**9) < GlobalId.transient(0)


@given(global_ids(), global_ids())
def test_order_is_kind_then_number(a: GlobalId, b: GlobalId) -> None:
    key_a, key_b = (int(a.kind), a.n), (int(b.kind), b.n)
    assert (a < b) == (key_a < key_b)
    assert (a <= b) == (key_a <= key_b)
    assert (a > b) == (key_a > key_b)
    assert (a >= b) == (key_a >= key_b)
    assert (a == b) == (key_a == key_b)


@given(st.lists(global_ids(), max_size=8))
def test_sorted_works(ids: list[GlobalId]) -> None:
    out = sorted(ids)
    assert all(x <= y for x, y in itertools.pairwise(out))


@given(global_ids())
def test_parse_is_inverse_of_str(g: GlobalId) -> None:
    assert GlobalId.parse(str(g)) == g
    assert str(GlobalId.parse(str(g))) == str(g)


@given(st.sampled_from(list(IdKind)), id_numbers())
def test_kind_constructors(kind: IdKind, n: int) -> None:
    g = CONSTRUCTORS[kind](n)
    assert g.kind is kind and g.n == n and g == GlobalId(kind, n)


def test_si_is_introspection_not_system() -> None:
    assert GlobalId.parse("si7") == GlobalId.introspection(7)
    assert GlobalId.parse("s7") == GlobalId.system(7)
    assert GlobalId.parse("si7") != GlobalId.parse("s7")


@pytest.mark.parametrize(
    "bad",
    ["", "7", "u", "si", "x7", "U7", "u-1", "u+1", " u7", "u7 ", "u07", "u1_0", "u٣", "s i7",
     "ui7", "u1.5", "t" + str(2**64), "u0x1"],
)  # fmt: skip
def test_parse_rejects_bad_strings(bad: str) -> None:
    with pytest.raises(ValueError, match="GlobalId"):
        GlobalId.parse(bad)


def test_parse_rejects_overlong_numbers_with_a_short_message() -> None:
    with pytest.raises(ValueError, match="not a GlobalId") as info:
        GlobalId.parse("u" + "1" * 5000)
    assert len(str(info.value)) < 200
    assert GlobalId.parse("u" + str(2**64 - 1)) == GlobalId.user(2**64 - 1)


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        GlobalId.parse(7)  # type: ignore[arg-type]


@given(global_ids())
def test_only_transient_is_transient(g: GlobalId) -> None:
    assert g.is_transient == (g.kind is IdKind.TRANSIENT)


@given(global_ids())
def test_hashable_and_equal_by_value(g: GlobalId) -> None:
    copy = GlobalId(g.kind, g.n)
    assert copy == g and hash(copy) == hash(g)
    assert {g: 1}[copy] == 1
    assert pickle.loads(pickle.dumps(g)) == g


def test_immutable() -> None:
    g = GlobalId.user(1)
    with pytest.raises(AttributeError):
        g._n = 2
    with pytest.raises(AttributeError):
        del g._n
    with pytest.raises(AttributeError):
        g.other = 2
    assert g == GlobalId.user(1)


@pytest.mark.parametrize("n", [-1, 2**64, 1.0, True, "1"])
def test_number_must_be_u64(n: object) -> None:
    with pytest.raises(ValueError, match="GlobalId number"):
        GlobalId(IdKind.USER, n)  # type: ignore[arg-type]


def test_kind_must_be_an_idkind() -> None:
    with pytest.raises(TypeError, match="IdKind"):
        GlobalId(2, 1)  # type: ignore[arg-type]


def test_comparison_with_other_types() -> None:
    assert GlobalId.user(1) != "u1"
    with pytest.raises(TypeError):
        _ = GlobalId.user(1) < "u1"  # type: ignore[operator]


def test_repr_names_the_constructor() -> None:
    assert repr(GlobalId.introspection(3)) == "GlobalId.introspection(3)"
