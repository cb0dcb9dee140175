"""`select`, `with_columns`, `group_by` and `agg` take their arguments as varargs or as one list
or tuple, like polars (`api.schema.flat_args`): both spellings build the same plan and schema."""

from __future__ import annotations

from twofold import col, count, mean, sum
from twofold.api.relation import Input, Relation
from twofold.api.schema import flat_args, parse_schema
from twofold.protocol import Get, GlobalId

GID = GlobalId.user(1)


def rel() -> Relation:
    schema = parse_schema({"k": int, "v": float, "s": str})
    return Relation(None, Get(id=GID), schema,
                    {GID: Input("t", "table", GID, schema, shard="table/t")})


def same(a: Relation, b: Relation) -> None:
    assert a.plan == b.plan
    assert a.schema == b.schema


def test_select_and_with_columns_take_a_list_or_varargs() -> None:
    r = rel()
    same(r.select(["k", col("v") * 2]), r.select("k", col("v") * 2))
    same(r.select(("s", "k")), r.select("s", "k"))
    same(r.select(["k"], "v"), r.select("k", "v"))  # mixed: one level unpacked in order
    same(r.with_columns([(col("v") + 1).alias("w")]), r.with_columns((col("v") + 1).alias("w")))
    assert r.select(["s", "k"]).columns == ["s", "k"]


def test_group_by_and_agg_take_a_list_or_varargs() -> None:
    r = rel()
    by_list = r.group_by(["k", "s"]).agg([count(), sum("v"), mean("v").alias("m")])
    by_args = r.group_by("k", "s").agg(count(), sum("v"), mean("v").alias("m"))
    same(by_list, by_args)
    assert by_list.columns == ["k", "s", "count", "v", "m"]


def test_flat_args_unpacks_one_level_only() -> None:
    assert flat_args(["a", ["b", "c"], ("d",)]) == ["a", "b", "c", "d"]
    assert flat_args([[["x"]]]) == [["x"]]
    assert flat_args(["ab"]) == ["ab"]  # a string is one argument, not its characters
    assert flat_args([]) == []
