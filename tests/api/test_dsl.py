"""Build-time behaviour of the DSL: schemas, names, types and the typed errors (no replica
needed: relations are values; only reading them runs anything)."""

from __future__ import annotations

import pytest

import twofold
from twofold import col, count, lit, mean, n_unique, sum, when
from twofold.api.relation import Input, Relation
from twofold.api.schema import Schema, parse_schema
from twofold.protocol import ColumnType, Get, GlobalId, Mfp, Reduce

GID = GlobalId.user(1)


def rel() -> Relation:
    schema = parse_schema({"id": int, "amount": float, "note": str, "ok": bool},
                          nullable=["note"])
    return Relation(None, Get(id=GID), schema,
                    {GID: Input("t", "table", GID, schema, shard="table/t")})


def test_parse_schema_nullable_control() -> None:
    s = parse_schema({"a": int, "b": "str", "c": ColumnType("float", False)}, nullable=["b"])
    assert s.types == (ColumnType("int", False), ColumnType("str", True),
                       ColumnType("float", False))
    assert parse_schema({"a": int}).types == (ColumnType("int", True),)
    assert parse_schema({"a": int}, nullable=False).types == (ColumnType("int", False),)
    assert parse_schema({"ab": int, "c": int}, nullable="ab").types == (
        ColumnType("int", True), ColumnType("int", False))


@pytest.mark.parametrize("bad", [{}, {"a": list}, {"a": "decimal"}, {"": int}])
def test_bad_schemas_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(twofold.InvalidSchema):
        parse_schema(bad)  # type: ignore[arg-type]


def test_nullable_naming_an_absent_column_is_refused() -> None:
    with pytest.raises(twofold.InvalidSchema, match="nope"):
        parse_schema({"a": int}, nullable=["nope"])


def test_select_duplicate_names_are_refused() -> None:
    with pytest.raises(twofold.DuplicateColumn, match="select: column 'id'"):
        rel().select("id", col("id") + 1)


def test_output_names_follow_polars() -> None:
    r = rel().select((col("amount") * 2).alias("double"), col("id") + 1,
                     col("note").str.len_chars(), (lit(1) + 2).alias("three"))
    assert r.columns == ["double", "id", "note", "three"]
    assert r.schema.as_dict() == {"double": "float", "id": "int", "note": "int?",
                                  "three": "int"}


def test_true_division_and_integer_division() -> None:
    r = rel().select((col("id") / 2).alias("a"), (col("id") // 2).alias("b"))
    assert r.schema.as_dict() == {"a": "float", "b": "int"}


def test_with_columns_replaces_and_appends() -> None:
    r = rel().with_columns(col("amount").cast(int), (col("id") > 3).alias("big"))
    assert r.columns == ["id", "amount", "note", "ok", "big"]
    assert r.schema.as_dict()["amount"] == "int"
    assert isinstance(r.plan, Mfp)


def test_when_then_otherwise_and_coalesce_types() -> None:
    r = rel().select(
        when(col("amount") > 5).then(lit("big")).when(col("amount") > 1).then(lit("mid"))
        .otherwise(lit("small")).alias("size"),
        when(col("ok")).then(col("id")).alias("maybe"),
        twofold.coalesce(col("note"), lit("?")).alias("note"),
    )
    assert r.schema.as_dict() == {"size": "str", "maybe": "int?", "note": "str"}


def test_unknown_column_names_column_and_operation() -> None:
    with pytest.raises(twofold.ColumnNotFound) as e:
        rel().filter(col("amout") > 1)
    assert e.value.column == "amout"
    assert e.value.operation == "filter"
    assert "amount" in str(e.value)
    with pytest.raises(twofold.ColumnNotFound, match="group_by"):
        rel().group_by("nope").agg(count())
    with pytest.raises(twofold.ColumnNotFound, match="top_k"):
        rel().top_k(3, "nope")
    with pytest.raises(twofold.ColumnNotFound, match="rename"):
        rel().rename({"nope": "x"})


@pytest.mark.parametrize(
    ("build", "column", "operation"),
    [
        (lambda r: r.filter(col("note") > 1), "note", "filter"),
        (lambda r: r.select(col("note") + 1), "note", "select"),
        (lambda r: r.filter(col("amount")), "amount", "filter"),
        (lambda r: r.filter(col("ok") & col("id")), "id", "filter"),
        (lambda r: r.select(col("id").str.to_lowercase()), "id", "select"),
        (lambda r: r.group_by("id").agg(sum("note")), "note", "sum"),
        (lambda r: r.select(when(col("id")).then(1).alias("x")), "id", "select"),
        (lambda r: r.select(twofold.coalesce(col("id"), col("note"))), "id", "select"),
    ],
)
def test_type_mismatch_names_column_and_operation(build: object, column: str,
                                                  operation: str) -> None:
    with pytest.raises(twofold.TypeMismatch) as e:
        build(rel())  # type: ignore[operator]
    assert e.value.column == column
    assert operation in e.value.operation
    assert isinstance(e.value, twofold.TwofoldError)


def test_join_checks_keys() -> None:
    a, b = rel(), rel().rename({"id": "key", "amount": "price"})
    with pytest.raises(twofold.TypeMismatch, match="join"):
        a.join(b, left_on="id", right_on="note")
    with pytest.raises(twofold.ColumnNotFound, match="right key"):
        a.join(b, on="id")
    j = a.join(b, left_on="id", right_on="key")
    assert j.columns == ["id", "amount", "note", "ok", "key", "price", "note_right",
                         "ok_right"]
    with pytest.raises(twofold.InvalidArgument, match="'left', 'right', 'full'"):
        a.join(b, left_on="id", right_on="key", how="outer")


def test_union_checks_arity_and_types() -> None:
    r = rel()
    with pytest.raises(twofold.TypeMismatch, match="union"):
        r.select("id").union(r.select("id", "note"))
    with pytest.raises(twofold.TypeMismatch, match="column 0"):
        r.select("id").union(r.select("note"))
    u = r.select("id").union(r.select(col("amount").cast(int).alias("x")))
    assert u.columns == ["id"]


def test_group_by_output_schema() -> None:
    g = rel().group_by("note").agg(count(), sum("amount").alias("total"),
                                   n_unique("id").alias("ids"), mean("amount").alias("avg"),
                                   col("amount").max().alias("top"))
    assert g.schema.as_dict() == {"note": "str?", "count": "int", "total": "float",
                                  "ids": "int", "avg": "float?", "top": "float"}
    assert isinstance(g.plan, Mfp) and isinstance(g.plan.input, Reduce)
    with pytest.raises(twofold.DuplicateColumn, match="agg"):
        rel().group_by("note").agg(sum("amount"), twofold.max("amount"))


def test_expressions_have_no_truth_value() -> None:
    with pytest.raises(TypeError, match="&"):
        bool(col("a") > 1)


@pytest.mark.parametrize("bad", [lambda: lit([1]), lambda: lit(2**70), lambda: col(""),
                                 lambda: col("a").str.contains("50%"),
                                 lambda: col("a").cast(bytes), lambda: count(distinct=True)])
def test_bad_arguments_are_refused(bad: object) -> None:
    with pytest.raises(twofold.TwofoldError):
        bad()  # type: ignore[operator]


def test_top_k_validates() -> None:
    with pytest.raises(twofold.InvalidArgument):
        rel().top_k(-1, "id")
    with pytest.raises(twofold.InvalidArgument):
        rel().top_k(1, ["id", "amount"], descending=[True])


def test_a_relation_is_not_its_rows() -> None:
    with pytest.raises(TypeError, match="collect"):
        list(rel())


def test_collect_without_database_is_a_typed_error() -> None:
    with pytest.raises(twofold.DatabaseClosed):
        rel().collect()


def test_schema_roundtrips_to_relation_desc() -> None:
    s = parse_schema({"a": int, "b": str}, nullable=["b"])
    assert Schema.of(s.desc()) == s


def test_sort_and_limit_validate() -> None:
    r = rel()
    with pytest.raises(twofold.ColumnNotFound, match="sort"):
        r.sort("nope")
    with pytest.raises(twofold.InvalidArgument):
        r.limit(-1)
    with pytest.raises(twofold.InvalidArgument):
        r.sort([])
    limited = r.sort("amount", descending=True).limit(2)
    assert [k.column for k in limited.order] == [1] and limited.order[0].desc
