"""Views are durable catalog objects (kind "view"), seen the same from SQL and from the DSL;
`DROP TABLE` and `DROP VIEW` follow the dependents rules; SQL's writes use the public write
hook (`Table.update_compiled` / `delete_compiled`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import twofold
from twofold import col
from twofold.sql.errors import sqlstate_of
from twofold.testing.profiles import examples


def _open(path: Path) -> twofold.Database:
    return twofold.open(path, runtimes="one", tick_interval=0.005, timeout=30)


def test_a_sql_view_is_durable_and_seen_by_the_dsl(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    text = "CREATE VIEW big (key, value) AS SELECT k, v * 2 FROM t WHERE v > 1"
    with _open(path) as db:
        db.sql("CREATE TABLE t (k int PRIMARY KEY, v int)")
        db.sql("INSERT INTO t VALUES (1, 1), (2, 5), (3, 7)")
        view = db.sql(text)
        assert isinstance(view, twofold.View) and view.sql == text
    with _open(path) as db:
        assert db.views() == ["big"] and ("big", "view") in db.objects()
        big = db.get("big")
        assert isinstance(big, twofold.View) and big.columns == ["key", "value"]
        # The DSL reads it and builds on it; SQL reads it, and what the DSL built on it.
        assert sorted(db.query(big).rows) == [(2, 10), (3, 14)]
        assert db.query(big.filter(col("value") > 12)).rows == [(3, 14)]
        db.sql("INSERT INTO t VALUES (4, 2)")
        assert sorted(db.sql("SELECT key FROM big").rows) == [(2,), (3,), (4,)]
        db.create_view("bigger", big.filter(col("value") > 4))
        assert sorted(db.sql("SELECT * FROM bigger").rows) == [(2, 10), (3, 14)]
        assert db.sql("SHOW CREATE VIEW big").rows == [("big", text)]
        assert db.sql("SHOW VIEWS").rows == [("big",), ("bigger",)]
        assert ("value", "true", "bigint") in db.sql("SHOW COLUMNS FROM big").rows
        # Other SQL over it: a join of the view with its table, a view over the DSL's view.
        assert db.sql("SELECT t.k FROM t JOIN big ON t.k = big.key WHERE t.v = 2").rows == [
            (4,)]
        db.sql("CREATE VIEW biggest AS SELECT max(value) AS m FROM bigger")
    with _open(path) as db:
        assert db.sql("SELECT m FROM biggest").rows == [(14,)]
        assert db.views() == ["big", "bigger", "biggest"]


def test_dsl_objects_are_readable_from_sql_and_sql_objects_from_the_dsl() -> None:
    with twofold.open(tick_interval=0.005, timeout=30) as db:
        t = db.create_table("t", {"k": int, "s": str})
        t.insert([(1, "a"), (2, "b"), (2, "c")])
        db.create_view("dsl_view", t.filter(col("k") == 2))
        db.create_materialized_view("dsl_mv", t.group_by("k").agg(twofold.count()))
        assert sorted(db.sql("SELECT s FROM dsl_view").rows) == [("b",), ("c",)]
        assert sorted(db.sql("SELECT * FROM dsl_mv").rows) == [(1, 1), (2, 2)]
        db.sql("CREATE VIEW sql_view AS SELECT s FROM dsl_view WHERE s <> 'b'")
        db.sql("CREATE MATERIALIZED VIEW sql_mv AS SELECT count(*) AS n FROM sql_view")
        db.sql("CREATE INDEX sql_idx ON sql_view (s)")
        assert db.query(db.get("sql_view")).rows == [("c",)]
        assert db.get("sql_idx").lookup("c").rows == [("c",)]
        t.insert([(2, "d")])
        assert db.query(db.get("sql_mv")).rows == [(2,)]
        assert db.sql("SELECT n FROM sql_mv").rows == [(2,)]


def test_drop_view_restricts_and_cascades() -> None:
    with twofold.open(tick_interval=0.005, timeout=30) as db:
        db.sql("CREATE TABLE t (k int)")
        db.sql("CREATE VIEW v AS SELECT k FROM t")
        db.sql("CREATE VIEW w AS SELECT k + 1 AS j FROM v")
        db.sql("CREATE MATERIALIZED VIEW m AS SELECT count(*) AS n FROM w")
        db.sql("CREATE INDEX i ON v (k)")
        with pytest.raises(twofold.DependencyError) as e:
            db.sql("DROP VIEW v")
        assert sqlstate_of(e.value) == "2BP01"
        # PostgreSQL's message and hint; the dependents on the error
        assert str(e.value) == "cannot drop view v because other objects depend on it"
        assert getattr(e.value, "hint", None) == \
            "Use DROP ... CASCADE to drop the dependent objects too."
        assert e.value.name == "v" and set(e.value.dependents) == {"i", "m", "w"}
        assert db.views() == ["m", "v", "w"]
        with pytest.raises(twofold.DependencyError, match="'m'"):
            db.drop("w")
        db.sql("DROP VIEW v CASCADE")
        assert db.objects() == [("t", "table")]
        with pytest.raises(twofold.TwofoldError) as u:
            db.sql("SELECT * FROM w")
        assert sqlstate_of(u.value) == "42P01"


def test_a_relation_over_a_dropped_view_is_refused() -> None:
    with twofold.open(tick_interval=0.005, timeout=30) as db:
        t = db.create_table("t", {"k": int})
        v = db.create_view("v", t.filter(col("k") > 0))
        stale = v.select("k")
        db.drop("v")
        with pytest.raises(twofold.UnknownObject, match="'v'"):
            db.create_materialized_view("m", stale)
        with pytest.raises(twofold.UnknownObject, match="'v'"):
            db.query(stale)
        db.create_view("v", t)  # the name is free again; the old relation still is refused
        with pytest.raises(twofold.UnknownObject, match="'v'"):
            db.query(stale)


def test_drop_table_is_durable_and_the_name_reusable(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with _open(path) as db:
        db.sql("CREATE TABLE t (k int PRIMARY KEY, v text)")
        db.sql("INSERT INTO t VALUES (1, 'old'), (2, 'old')")
        db.sql("CREATE VIEW tv AS SELECT v FROM t")
        db.sql("CREATE TABLE keep (x int)")
        old = db.get("t")
        assert isinstance(old, twofold.Table)
        with pytest.raises(twofold.DependencyError, match="cannot drop table t") as e:
            db.sql("DROP TABLE t")
        assert sqlstate_of(e.value) == "2BP01" and e.value.dependents == ("tv",)
        db.sql("DROP TABLE t CASCADE")
        assert db.objects() == [("keep", "table")]
        with pytest.raises(twofold.UnknownObject, match="dropped"):
            old.insert([(3, "late")])
        with pytest.raises(twofold.TwofoldError) as gone:
            db.sql("INSERT INTO t VALUES (3, 'late')")
        assert sqlstate_of(gone.value) == "42P01"
    with _open(path) as db:
        # Not resurrected from its (garbage) shard on reopen.
        assert db.objects() == [("keep", "table")]
        db.sql("CREATE TABLE t (k int, w double precision)")  # another schema, same name
        assert db.sql("SELECT * FROM t").rows == []
        db.sql("INSERT INTO t VALUES (7, 1.5)")
    with _open(path) as db:
        assert db.sql("SELECT * FROM t").rows == [(7, 1.5)]
        db.drop("t")
        db.create_table("t", {"k": int})
        assert db.query(db.get("t")).rows == []


def test_drop_table_from_the_dsl_refuses_dependents() -> None:
    with twofold.open(tick_interval=0.005, timeout=30) as db:
        t = db.create_table("t", {"k": int})
        db.create_index("i", t, "k")
        with pytest.raises(twofold.DependencyError, match="'i'"):
            db.drop(t)
        db.drop(t, cascade=True)
        assert db.objects() == []


def test_the_public_write_hook_takes_protocol_expressions() -> None:
    from twofold.protocol import Call, Column, Literal

    with twofold.open(tick_interval=0.005, timeout=30) as db:
        t = db.create_table("t", {"k": int, "v": float}, primary_key="k")
        t.insert([(1, 1.0), (2, 2.0), (3, None)])
        w = t.update_compiled({"v": Call(func="mul", args=[Column(index=1),
                                                           Literal(value=10.0)])},
                              Call(func="gt", args=[Column(index=0), Literal(value=1)]))
        assert w.count == 2
        assert sorted(db.query(t).rows) == [(1, 1.0), (2, 20.0), (3, None)]
        assert t.delete_compiled(Call(func="is_null", args=[Column(index=1)])).count == 1
        assert sorted(db.query(t).rows) == [(1, 1.0), (2, 20.0)]
        with pytest.raises(twofold.InvalidArgument, match="protocol expression"):
            t.delete_compiled(col("k") > 1)  # type: ignore[arg-type]
        with pytest.raises(twofold.ColumnNotFound):
            t.update_compiled({"nope": Literal(value=1)})
        with pytest.raises(twofold.TwofoldError):  # an error in the expression: nothing written
            t.update_compiled({"k": Call(func="div", args=[Column(index=0),
                                                           Literal(value=0)])})
        assert sorted(db.query(t).rows) == [(1, 1.0), (2, 20.0)]


def test_the_sql_layer_uses_no_private_table_api() -> None:
    sql_dir = Path(twofold.__file__).parent / "sql"
    # A table's private writing parts, reached through anything but `self`.
    private = re.compile(r"(?<!\bself)\.(_run|_writer|_table|_compile|_predicate|_setters)\b")
    offenders = [f"{p.name}:{i}: {line.strip()}" for p in sorted(sql_dir.glob("*.py"))
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if private.search(line)]
    assert not offenders, offenders


def test_show_create_gives_statements_that_create_the_object_again(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with _open(path) as db:
        db.sql('CREATE TABLE "Mixed T" (k int PRIMARY KEY, "V" text, n double precision '
               'NOT NULL)')
        db.sql('CREATE INDEX by_n ON "Mixed T" (n)')
        db.sql('CREATE VIEW w AS SELECT k FROM "Mixed T"')
        db.sql("CREATE INDEX w_k ON w (k)")
    with _open(path) as db:  # from the catalog alone
        shown = {n: db.sql(f'SHOW CREATE TABLE "{n}"').rows[0][1]
                 for n in ("Mixed T", "by_n", "w", "w_k")}
        assert shown == {
            "Mixed T": 'CREATE TABLE "Mixed T" (k bigint NOT NULL, "V" text, '
                       'n double precision NOT NULL, PRIMARY KEY (k))',
            "by_n": 'CREATE INDEX by_n ON "Mixed T" (n)',
            "w": 'CREATE VIEW w AS SELECT k FROM "Mixed T"',
            "w_k": "CREATE INDEX w_k ON w (k)",
        }
        assert ("w_k", "w", "k") in db.sql("SHOW INDEXES").rows
        before = [db.get(n) for n in shown]
        db.sql('DROP TABLE "Mixed T" CASCADE')
        for n in shown:
            db.sql(shown[n])
        after = [db.get(n) for n in shown]
        assert [(type(o), o.schema) for o in after] == [(type(o), o.schema) for o in before]
        assert db.get("Mixed T").primary_key == ("k",)  # type: ignore[union-attr]


_OPS = st.lists(st.tuples(st.sampled_from(["table", "view", "mv", "drop", "drop cascade"]),
                          st.integers(0, 4), st.lists(st.integers(0, 4), min_size=1,
                                                      max_size=2)),
                min_size=1, max_size=8)


@pytest.fixture(scope="module")
def ddl_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[twofold.Database, Path]]:
    path = tmp_path_factory.mktemp("ddl") / "db.sqlite"
    with twofold.open(path, runtimes="one", tick_interval=0.005, timeout=30) as db:
        yield db, path


_example = iter(range(10**9))


@settings(max_examples=examples(4), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=_OPS)
def test_random_ddl_keeps_the_catalog_a_model_predicts(
        ddl_db: tuple[twofold.Database, Path], ops: list[tuple[str, int, list[int]]]) -> None:
    """Random CREATE TABLE / VIEW / MATERIALIZED VIEW and DROP [CASCADE] against a model of
    what exists and what reads what: the catalog, the errors (42P07, 42P01, 2BP01) and what
    a re-created table holds are the model's."""
    db, _ = ddl_db
    prefix = f"x{next(_example)}_"
    model: dict[str, tuple[str, set[str]]] = {}  # name -> (kind, names it reads)

    def closure(name: str) -> set[str]:
        out = {name}
        while True:
            more = {n for n, (_, deps) in model.items() if deps & out} - out
            if not more:
                return out
            out |= more

    for op, i, over in ops:
        name = f"{prefix}{i}"
        reads = sorted({f"{prefix}{j}" for j in over} & set(model))
        state: str | None = None
        try:
            if op == "table":
                db.sql(f"CREATE TABLE {name} (k int)")
            elif op in ("view", "mv"):
                if not reads:
                    continue
                kind = "MATERIALIZED VIEW" if op == "mv" else "VIEW"
                db.sql(f"CREATE {kind} {name} AS SELECT count(*) AS k FROM {', '.join(reads)}")
            else:
                db.sql(f"DROP {'VIEW' if model.get(name, ('',))[0] != 'table' else 'TABLE'} "
                       f"{name}{' CASCADE' if op == 'drop cascade' else ''}")
        except twofold.TwofoldError as e:
            state = sqlstate_of(e)
        if op in ("table", "view", "mv"):
            if name in model:
                assert state == "42P07", (op, name, state)
            else:
                assert state is None, (op, name, state)
                kind = {"table": "table", "view": "view", "mv": "materialized view"}[op]
                model[name] = (kind, set(reads) if op != "table" else set())
                if op == "table":
                    assert db.sql(f"SELECT count(*) FROM {name}").rows == [(0,)]
                    db.sql(f"INSERT INTO {name} VALUES (1)")
        elif name not in model:
            assert state == "42P01", (op, name, state)
        elif len(closure(name)) > 1 and op == "drop":
            assert state == "2BP01", (op, name, state)
        else:
            assert state is None, (op, name, state)
            for gone in closure(name):
                del model[gone]
        got = {n: k for n, k in db.objects() if n.startswith(prefix)}
        assert got == {n: k for n, (k, _) in model.items()}
    for name, (kind, _) in model.items():
        if kind != "table":
            assert len(db.sql(f"SELECT * FROM {name}").rows) == 1


def test_random_ddl_survives_reopening(ddl_db: tuple[twofold.Database, Path]) -> None:
    db, path = ddl_db
    objects = db.objects()
    rows = {n: sorted(db.sql(f"SELECT * FROM {n}").rows) for n, k in objects if k != "index"}
    with twofold.open(path, runtimes="one", tick_interval=0.005, timeout=30) as other:
        assert other.objects() == objects
        assert {n: sorted(other.sql(f"SELECT * FROM {n}").rows) for n in rows} == rows


def test_the_dsls_string_agg_is_sqls() -> None:
    from twofold import string_agg

    with twofold.open(tick_interval=0.005, timeout=30) as db:
        t = db.create_table("t", {"g": int, "s": str})
        t.insert([(1, "b"), (1, "a"), (1, None), (2, None), (1, "b"), (3, "z")])
        dsl = t.group_by("g").agg(string_agg("s", ",").alias("all"),
                                  string_agg("s", "-", descending=True, distinct=True)
                                  .alias("set"))
        m = db.create_materialized_view("m", dsl)
        sql = ("SELECT g, string_agg(s, ',' ORDER BY s), string_agg(DISTINCT s, '-' ORDER BY s "
               "DESC) FROM t GROUP BY g")
        assert sorted(db.query(dsl).rows) == sorted(db.sql(sql).rows) == [
            (1, "a,b,b", "b-a"), (2, None, None), (3, "z", "z")]
        t.delete([(1, "a")])
        assert sorted(db.query(m).rows) == sorted(db.sql(sql).rows) == [
            (1, "b,b", "b"), (2, None, None), (3, "z", "z")]
        with pytest.raises(twofold.TypeMismatch, match="str"):
            t.group_by("s").agg(string_agg("g", ","))
        with pytest.raises(twofold.InvalidArgument, match="separator"):
            string_agg("s", 1)  # type: ignore[arg-type]


def test_drop_of_several_names_is_one_change_all_or_none(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with _open(path) as db:
        for t in ("a", "b", "c"):
            db.sql(f"CREATE TABLE {t} (k int)")
        db.sql("CREATE VIEW av AS SELECT k FROM a")
        db.sql("CREATE MATERIALIZED VIEW am AS SELECT count(*) AS n FROM av")
        before = sorted(db.objects())
        # Refusals change nothing: a missing name, a dependent outside the set, a wrong kind.
        for sql, state in [("DROP TABLE b, nope", "42P01"), ("DROP TABLE b, a", "2BP01"),
                           ("DROP VIEW av, b", "42809"), ("DROP TABLE b, av, am", "42809")]:
            with pytest.raises(twofold.TwofoldError) as e:
                db.sql(sql)
            assert sqlstate_of(e.value) == state, (sql, e.value)
            assert sorted(db.objects()) == before, sql
        # Dependents inside the set go with it, without CASCADE; names may repeat.
        db.sql("DROP MATERIALIZED VIEW am, am")
        db.sql("DROP VIEW av")
        db.sql("CREATE VIEW av AS SELECT k FROM a")
        db.sql("DROP TABLE IF EXISTS b, nope, c")
        assert sorted(n for n, _ in db.objects()) == ["a", "av"]
        db.sql("CREATE TABLE b (k int)")
        db.sql("DROP TABLE a, b CASCADE")
        assert db.objects() == []
    with _open(path) as db:
        assert db.objects() == []
        db.sql("CREATE TABLE a (k int)")
        assert db.sql("SELECT count(*) FROM a").rows == [(0,)]


def test_show_create_materialized_view_is_its_statement(tmp_path: Path) -> None:
    """A SQL-made materialized view records its statement (as a view does): `SHOW CREATE
    MATERIALIZED VIEW` gives it, after a reopen too; before, it printed the object's repr."""
    path = tmp_path / "mv.sqlite"
    text = "CREATE MATERIALIZED VIEW counts AS SELECT k, count(*) AS n FROM t GROUP BY k"
    with _open(path) as db:
        db.sql("CREATE TABLE t (k bigint, v bigint)")
        view = db.sql(text + ";")
        assert isinstance(view, twofold.MaterializedView) and view.sql == text
        assert db.sql("SHOW CREATE MATERIALIZED VIEW counts").rows == [("counts", text)]
    with _open(path) as db:
        assert db.sql("SHOW CREATE MATERIALIZED VIEW counts").rows == [("counts", text)]
        assert db.get("counts").sql == text
