"""RowDescription's table OID and attribute number, as PostgreSQL 15 sends them: for a column
read straight from a table, view or materialized view, that object's OID and the column's
number; 0/0 for a computed one. A client resolves them through `pg_class` / `pg_attribute`
(JDBC's getTableName, BI tools), so what is compared is what each server's own catalog
relations name: the same (relation, column) from twofold as from PostgreSQL."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import psycopg
import pytest
from tests.server.wire import Raw, msg

from twofold.testing.pgwire import ServerHandle

_DDL = ["CREATE TABLE ro_t (k bigint PRIMARY KEY, v text, n integer)",
        "CREATE TABLE ro_u (k bigint, w text)",
        "CREATE VIEW ro_v AS SELECT v, k, n + 1 AS n1 FROM ro_t",
        "CREATE MATERIALIZED VIEW ro_m AS SELECT k, v FROM ro_t",
        "INSERT INTO ro_t VALUES (1, 'a', 10), (2, 'b', 20)",
        "INSERT INTO ro_u VALUES (1, 'x')",
        "CREATE TABLE ro_v_w (w varchar(4))"]

QUERIES = [
    "SELECT * FROM ro_t",
    "SELECT v AS vv, k, k + 1, 1 FROM ro_t",
    "SELECT (k), n FROM ro_t",
    "SELECT * FROM ro_v",
    "SELECT n1, v FROM ro_v",
    "SELECT * FROM ro_m",
    "SELECT ro_t.v, u.w, u.k FROM ro_t JOIN ro_u AS u ON ro_t.k = u.k",
    "SELECT x.* FROM ro_t AS x",
    "SELECT x.v FROM (SELECT v FROM ro_t) x",
    "SELECT b FROM (SELECT v FROM ro_t) AS x(b)",
    "WITH c AS (SELECT n, k FROM ro_t) SELECT n, k * 2 FROM c",
    "SELECT k FROM ro_t UNION SELECT k FROM ro_u",
    "SELECT count(*), v FROM ro_t GROUP BY v",
    "SELECT DISTINCT v FROM ro_t",
    "SELECT w FROM ro_t JOIN ro_u USING (k)",
    "SELECT 1 AS one",
    "SELECT k::bigint, v::text, n::integer, CAST(k AS bigint) AS kk FROM ro_t",
    "SELECT k::integer, n::bigint, v::varchar, (k)::bigint FROM ro_t",
    "SELECT w::text FROM ro_v_w",
]


def _named(con: psycopg.Connection[tuple[object, ...]], cur: psycopg.Cursor[tuple[object, ...]]
           ) -> list[tuple[str, str | None, str | None]]:
    """Each result column's name and the (relation, column) its origin names in `con`'s own
    pg_class / pg_attribute (None, None: sent as 0/0)."""
    res = cur.pgresult
    assert res is not None
    out = []
    for i in range(res.nfields):
        table, col = res.ftable(i), res.ftablecol(i)
        name = (res.fname(i) or b"").decode()
        if table == 0:
            assert col == 0, name
            out.append((name, None, None))
            continue
        rel = con.execute("SELECT relname FROM pg_class WHERE oid = %s", [table]).fetchall()
        att = con.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s AND "
                          "attnum = %s", [table, col]).fetchall()
        assert len(rel) == 1 and len(att) == 1, (name, table, col, rel, att)
        out.append((name, str(rel[0][0]), str(att[0][0])))
    return out


@pytest.fixture(scope="module")
def pg(postgres: tuple[str, int]) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    host, port = postgres
    with psycopg.connect(host=host, port=port, user="postgres", dbname="postgres",
                         autocommit=True) as con:
        for t in ("ro_m", "ro_v"):
            con.execute(f"DROP {'MATERIALIZED ' if t == 'ro_m' else ''}VIEW IF EXISTS {t}")
        con.execute("DROP TABLE IF EXISTS ro_t, ro_u, ro_v_w")
        for s in _DDL:
            con.execute(s)
        yield con


@pytest.fixture(scope="module")
def tf(server: ServerHandle) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as con:
        for s in _DDL:
            con.execute(s)
        yield con


@pytest.mark.parametrize("sql", QUERIES)
def test_origins_as_postgres(pg: psycopg.Connection[tuple[object, ...]],
                             tf: psycopg.Connection[tuple[object, ...]], sql: str) -> None:
    want = _named(pg, pg.execute(sql))
    assert _named(tf, tf.execute(sql)) == want  # the extended protocol (unnamed statement)
    with tf.cursor() as cur:  # the simple protocol
        assert _named(tf, cur.execute(sql, prepare=False)) == want
    raw = tf.pgconn.exec_(sql.encode())  # a simple Query message
    assert [(raw.ftable(i) != 0) for i in range(raw.nfields)] == [
        w[1] is not None for w in want]


def test_origins_of_a_prepared_lookup(tf: psycopg.Connection[tuple[object, ...]]) -> None:
    """A prepared point lookup keeps its origins at every execution (the fast path's too)."""
    tf.execute("CREATE INDEX ro_t_k ON ro_t (k)")
    want = [("v", "ro_t", "v"), ("k", "ro_t", "k"), ("?column?", None, None)]
    for _ in range(8):
        cur = tf.execute("SELECT v, k, n * 2 FROM ro_t WHERE k = %s", [1], prepare=True)
        assert cur.fetchall() == [("a", 1, 20)]
        assert _named(tf, cur) == want


def test_origins_of_a_described_statement(server: ServerHandle,
                                          tf: psycopg.Connection[tuple[object, ...]]) -> None:
    """Describe of a named statement (before any execution) says them too."""
    raw = Raw(server.host, server.port)
    try:
        raw.login()
        raw.send(msg(b"P", b"ro_s\0SELECT n, v || 'x' FROM ro_t WHERE k = $1\0\0\0") +
                 msg(b"D", b"Sro_s\0") + msg(b"S"))
        body = next(b for k, b in raw.until(b"Z") if k == b"T")
    finally:
        raw.close()
    fields, at = [], 2
    for _ in range(struct.unpack_from("!h", body)[0]):
        end = body.index(b"\0", at)
        table, attnum = struct.unpack_from("!ih", body, end + 1)
        fields.append((body[at:end].decode(), table, attnum))
        at = end + 19
    oid = tf.execute("SELECT oid FROM pg_class WHERE relname = 'ro_t'").fetchall()[0][0]
    assert fields == [("n", oid, 3), ("?column?", 0, 0)]


def test_origins_move_with_the_catalog(tf: psycopg.Connection[tuple[object, ...]]) -> None:
    """A relation dropped and made again (another column order) is described afresh."""
    tf.execute("CREATE TABLE ro_w (a bigint, b text)")
    assert _named(tf, tf.execute("SELECT b FROM ro_w")) == [("b", "ro_w", "b")]
    tf.execute("DROP TABLE ro_w")
    tf.execute("CREATE TABLE ro_w (b text, c bigint, a bigint)")
    assert _named(tf, tf.execute("SELECT a, b FROM ro_w")) == [("a", "ro_w", "a"),
                                                               ("b", "ro_w", "b")]


def test_origins_of_a_cursor(pg: psycopg.Connection[tuple[object, ...]],
                             tf: psycopg.Connection[tuple[object, ...]]) -> None:
    """FETCH from a cursor over a query says them as the query does."""
    got = []
    for con in (pg, tf):
        with con.transaction():
            con.execute("DECLARE ro_c CURSOR FOR SELECT n, v || 'x', k FROM ro_t ORDER BY k")
            got.append(_named(con, con.execute("FETCH 1 ro_c")))
            con.execute("CLOSE ro_c")
    assert got[1] == got[0] == [("n", "ro_t", "n"), ("?column?", None, None),
                                ("k", "ro_t", "k")]


def test_jdbc_result_set_metadata_query(tf: psycopg.Connection[tuple[object, ...]]) -> None:
    """pgjdbc's ResultSetMetaData (getTableName, getColumnName, isNullable) sends this query
    with the RowDescription's table OIDs and attribute numbers; it finds each column."""
    res = tf.execute("SELECT v, k, k + 1 FROM ro_t").pgresult
    assert res is not None
    pairs = [(res.ftable(i), res.ftablecol(i)) for i in range(res.nfields) if res.ftable(i)]
    vals = " UNION ALL ".join(f"SELECT {t} AS oid, {c} AS attnum" for t, c in pairs)
    got = tf.execute(
        "SELECT c.oid, a.attnum, a.attname, c.relname, n.nspname, a.attnotnull OR "
        "(t.typtype = 'd' AND t.typnotnull), a.attidentity != '' OR "
        "pg_catalog.pg_get_expr(d.adbin, d.adrelid) LIKE '%nextval(%' "
        "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON (c.relnamespace = n.oid) "
        "JOIN pg_catalog.pg_attribute a ON (c.oid = a.attrelid) "
        "JOIN pg_catalog.pg_type t ON (a.atttypid = t.oid) "
        "LEFT JOIN pg_catalog.pg_attrdef d ON (d.adrelid = a.attrelid AND d.adnum = a.attnum) "
        f"JOIN ({vals}) vals ON (c.oid = vals.oid AND a.attnum = vals.attnum)").fetchall()
    assert sorted((r[2], r[3], r[4], r[5]) for r in got) == [
        ("k", "ro_t", "public", True), ("v", "ro_t", "public", False)]
