"""Catalog relations for tools: the parts of `pg_catalog` and `information_schema` that psql
(`\\dt`, `\\d NAME`, `\\di`, `\\dv`, `\\dm`), SQLAlchemy's `inspect()`, asyncpg and JDBC tools
read, plus twofold's own `mz_catalog`-style relations (`twofold_objects`, `twofold_columns`,
`twofold_indexes`) and monitoring relations (`monitoring`: frontiers, lag, arrangement sizes,
peek and step durations).

Contract: `is_catalog_query(sql)` says whether a statement reads these relations (it names a
`pg_` relation, `pg_catalog.`, `information_schema.` or `twofold_`); `run(db, sql, params)`
answers it from a snapshot of twofold's catalog (tables, views, materialized views, indexes,
their columns and types) loaded into an in-memory DuckDB database whose tables have
PostgreSQL's catalog names and columns (`catalog_ddl`), after rewriting the PostgreSQL-only
spellings psql uses (`OPERATOR(pg_catalog.~)`, `COLLATE pg_catalog.default`, `::regclass`). The
snapshot is rebuilt when the catalog changes; the monitoring relations a query names are
refilled, live, for that query (under the snapshot's lock, so concurrent queries each see their
own complete rows). Result columns are typed as the engine's scalars. A catalog query DuckDB
cannot run is an error naming the query (`0A000`), never a wrong answer from a user table: user
relations are empty in the snapshot and are never queried there.
"""

from __future__ import annotations

import asyncio
import re
import threading
import zlib
from typing import Any

from twofold.server import monitoring
from twofold.server.catalog_ddl import DDL as _DDL
from twofold.server.catalog_ddl import FORMAT as _FORMAT
from twofold.server.catalog_ddl import TYPES as _TYPES
from twofold.server.shims import DEFAULTS
from twofold.server.types import BPCHAR, BYTEA, NUMERIC, OIDS, SIZES, TEXT, VARCHAR
from twofold.sql.errors import FeatureNotSupported
from twofold.sql.pgtypes import char_limit

_CATALOG = re.compile(r"\b(pg_catalog\.|information_schema\.|pg_(class|type|namespace|attribute|"
                      r"index|indexes|database|settings|am|proc|description|attrdef|constraint|"
                      r"roles|user|tables|views|matviews|inherits|trigger|collation|"
                      r"tablespace|policy|range|enum|extension|opclass|auth_members|language|"
                      r"event_trigger|foreign_data_wrapper|foreign_server|stat_activity)\b|"
                      r"twofold_(objects|columns|"
                      r"indexes|frontiers|lag|arrangement_sizes|peek_durations|"
                      r"step_durations)\b)", re.I)

PUBLIC, PG_CATALOG, INFO_SCHEMA = 2200, 11, 13183


_OPCLASS = 3124  # every index column's operator class (btree int8_ops, the default)


def oid_of(name: str) -> int:
    return 16384 + zlib.crc32(name.encode()) % 1_000_000_000


def is_catalog_query(sql: str) -> bool:
    return _CATALOG.search(sql) is not None


def _describe(db: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A snapshot of the catalog (on the database's loop): objects, columns, indexes."""
    from twofold.sql.planner import Planner

    objects = [(n, k) for n, k in db.objects()]
    texts: dict[str, str] = {n: getattr(db.get(n), "sql", None) or "" for n, k in objects
                             if k in ("view", "materialized view")}
    sql_views = _sql_views(db)  # views kept by the SQL layer, where it keeps its own
    objects += [(n, "view") for n in sql_views if n not in texts]
    texts.update({n: v.text for n, v in sql_views.items() if n not in texts})
    planner = Planner(db)
    columns: dict[str, list[tuple[str, str, bool]]] = {}
    indexes: dict[str, tuple[str, list[str]]] = {}
    keys: dict[str, list[str]] = {}
    for name, kind in objects:
        try:
            rel = planner.relation(name)
        except Exception:
            continue
        columns[name] = [(c.name, c.column_type.scalar, bool(c.column_type.nullable))
                         for c in rel.cols if not c.hidden]
        # as declared (a table) or recorded (a SQL view, materialized view or index)
        columns[name] = _declared(db, name, columns[name])
        if kind == "table":
            keys[name] = list(getattr(db.get(name), "primary_key", None) or ())
        if kind == "index":
            idx = db.get(name)
            on = _source_name(idx)
            indexes[name] = (on, list(getattr(idx, "key", ())))
    key = tuple(sorted(objects)), tuple(sorted((k, tuple(v)) for k, v in columns.items()))
    return key, {"objects": objects, "columns": columns, "indexes": indexes, "views": texts,
                 "keys": keys}


def _sql_views(db: Any) -> dict[str, Any]:
    from twofold.sql import statements

    views = getattr(statements, "views", None)
    return {} if views is None else dict(views(db))


def _source_name(idx: Any) -> str:
    source = getattr(idx, "source", None)
    name = getattr(source, "name", None)
    if isinstance(name, str) and name:
        return name
    inputs = getattr(source, "inputs", None) or {}
    names = {getattr(i, "name", "") for i in inputs.values()}
    return names.pop() if len(names) == 1 else ""


class _Snapshot:
    def __init__(self, info: dict[str, Any]) -> None:
        import duckdb

        self.con = duckdb.connect(":memory:")
        self.lock = threading.Lock()
        self.con.execute(_DDL)
        self._fill(info)

    def _fill(self, info: dict[str, Any]) -> None:
        con = self.con
        con.executemany("INSERT INTO pg_namespace VALUES (?, ?, 10, NULL)",
                        [(PG_CATALOG, "pg_catalog"), (PUBLIC, "public"),
                         (INFO_SCHEMA, "information_schema")])
        con.execute("INSERT INTO pg_am VALUES (2, 'heap', 'heap_tableam_handler', 't'), "
                    "(403, 'btree', 'bthandler', 'i')")
        con.executemany("INSERT INTO _settings VALUES (?, ?)",
                        [*DEFAULTS.items(), ("default_table_access_method", "heap")])
        con.execute(f"INSERT INTO pg_opclass VALUES ({_OPCLASS}, 403, 'int8_ops', 11, 10, "
                    "1976, 20, true, 0)")
        con.execute("INSERT INTO pg_database VALUES (16384, 'twofold', 10, 6, 'c', false, "
                    "true, -1, 1663, 'C', 'C', NULL, NULL, NULL)")
        con.execute("INSERT INTO pg_roles VALUES (10, 'twofold', true, true, true, true, true, "
                    "false, -1, NULL, NULL, true, NULL)")
        con.execute("INSERT INTO pg_language (oid, lanname, lanowner, lanispl, lanpltrusted) "
                    "VALUES (12, 'internal', 10, false, false), (13, 'c', 10, false, false), "
                    "(14, 'sql', 10, false, true)")
        con.execute("INSERT INTO pg_tablespace (oid, spcname, spcowner) VALUES "
                    "(1663, 'pg_default', 10), (1664, 'pg_global', 10)")
        con.executemany(
            "INSERT INTO pg_type (oid, typname, typnamespace, typowner, typlen, typbyval, "
            "typtype, typcategory, typispreferred, typisdefined, typdelim, typrelid, typelem, "
            "typarray, typinput, typoutput, typreceive, typsend, typalign, typstorage, "
            "typnotnull, typbasetype, typtypmod, typndims, typcollation) VALUES "
            "(?, ?, 11, 10, ?, ?, 'b', ?, false, true, ',', 0, 0, ?, ?, ?, ?, ?, 'i', 'p', "
            "false, 0, -1, 0, 0)",
            [(o, n, ln, ln in (1, 2, 4, 8), cat, arr, f"{n}in", f"{n}out", f"{n}recv",
              f"{n}send") for o, n, ln, cat, arr in _TYPES])
        con.executemany(
            "INSERT INTO pg_type (oid, typname, typnamespace, typowner, typlen, typbyval, "
            "typtype, typcategory, typispreferred, typisdefined, typdelim, typrelid, typelem, "
            "typarray, typinput, typoutput, typreceive, typsend, typalign, typstorage, "
            "typnotnull, typbasetype, typtypmod, typndims, typcollation) VALUES "
            "(?, ?, 11, 10, -1, false, 'b', 'A', false, true, ',', 0, ?, 0, 'array_in', "
            "'array_out', 'array_recv', 'array_send', 'i', 'x', false, 0, -1, 0, 0)",
            [(arr, f"_{n}", o) for o, n, _, _, arr in _TYPES if arr])
        settings = [("server_version", "15.0"), ("server_encoding", "UTF8"),
                    ("client_encoding", "UTF8"), ("standard_conforming_strings", "on"),
                    ("max_identifier_length", "63"), ("integer_datetimes", "on"),
                    ("DateStyle", "ISO, MDY"), ("TimeZone", "UTC"), ("search_path", "public")]
        con.executemany("INSERT INTO pg_settings (name, setting, context, vartype, source) "
                        "VALUES (?, ?, 'user', 'string', 'default')", settings)
        relkind = {"table": "r", "view": "v", "materialized view": "m", "index": "i"}
        ttype = {"table": "BASE TABLE", "view": "VIEW", "materialized view": "MATERIALIZED VIEW"}
        indexed = {on for on, _ in info["indexes"].values()}
        for name, kind in info["objects"]:
            cols = info["columns"].get(name)
            if cols is None:
                continue
            if kind == "index" and name in info["indexes"]:  # an index's attributes: its key
                by = {c[0]: c for c in info["columns"].get(info["indexes"][name][0], cols)}
                cols = [by[k] for k in info["indexes"][name][1] if k in by] or cols
            oid = oid_of(name)
            # PostgreSQL's views and materialized views have no NOT NULL constraints: their
            # columns are nullable in pg_attribute and information_schema (psql's \d,
            # SQLAlchemy's reflection), however their rows are; twofold_columns says which
            constrained = kind in ("table", "index")
            con.execute(
                "INSERT INTO pg_class (oid, relname, relnamespace, reltype, reloftype, "
                "relowner, relam, relfilenode, reltablespace, relpages, reltuples, "
                "relallvisible, reltoastrelid, relhasindex, relisshared, relpersistence, "
                "relkind, relnatts, relchecks, relhasrules, relhastriggers, relhassubclass, "
                "relrowsecurity, relforcerowsecurity, relispopulated, relreplident, "
                "relispartition, relrewrite) VALUES (?, ?, 2200, 0, 0, 10, ?, ?, 0, 0, -1, "
                "0, 0, ?, false, 'p', ?, ?, 0, false, false, false, false, false, true, 'd', "
                "false, 0)",
                [oid, name, 403 if kind == "index" else (2 if kind != "view" else 0), oid,
                 name in indexed, relkind[kind], len(cols)])
            con.executemany(
                "INSERT INTO pg_attribute (attrelid, attname, atttypid, attstattarget, attlen, "
                "attnum, attndims, attcacheoff, atttypmod, attbyval, attalign, attstorage, "
                "attcompression, attnotnull, atthasdef, atthasmissing, attidentity, "
                "attgenerated, attisdropped, attislocal, attinhcount, attcollation) VALUES "
                "(?, ?, ?, -1, ?, ?, 0, -1, ?, ?, 'i', ?, '', ?, false, false, '', '', "
                "false, true, 0, 0)",
                [(oid, c, _oid(s), SIZES.get(_oid(s), -1), i, _typmod(s),
                  SIZES.get(_oid(s), -1) in (1, 2, 4, 8), _storage(s),
                  constrained and not nullable)
                 for i, (c, s, nullable) in enumerate(cols, 1)])
            if kind != "index":
                con.execute("INSERT INTO information_schema_tables VALUES "
                            "('twofold', 'public', ?, ?, ?)",
                            [name, ttype[kind], "YES" if kind == "table" else "NO"])
                con.executemany(
                    "INSERT INTO information_schema_columns VALUES ('twofold', 'public', ?, ?, "
                    "?, NULL, ?, ?, ?, NULL, ?)",
                    [(name, c, i, "YES" if nullable or not constrained else "NO",
                      _FORMAT.get(_oid(s), "text"), _length(s), _typname(_oid(s)))
                     for i, (c, s, nullable) in enumerate(cols, 1)])
            con.execute("INSERT INTO twofold_objects VALUES (?, ?, ?)", [name, kind, oid])
            con.executemany("INSERT INTO twofold_columns VALUES (?, ?, ?, ?, ?)",
                            [(name, c, i, _format(s), nullable)
                             for i, (c, s, nullable) in enumerate(cols, 1)])
        for name, (on, key) in info["indexes"].items():
            cols = [c for c, _, _ in info["columns"].get(on, [])]
            nums = [cols.index(k) + 1 if k in cols else 0 for k in key]
            con.execute(
                "INSERT INTO pg_index VALUES (?, ?, ?, ?, false, false, false, false, true, "
                "false, true, false, true, true, false, ?, ?, ?, ?, NULL, NULL)",
                [oid_of(name), oid_of(on), len(key), len(key), nums, [0] * len(key),
                 [_OPCLASS] * len(key), " ".join("0" * len(key))])
            con.execute("INSERT INTO _indexdef VALUES (?, ?)", [
                oid_of(name), f"CREATE INDEX {name} ON public.{on} USING arrangement "
                f"({', '.join(key)})"])
            con.execute("INSERT INTO twofold_indexes VALUES (?, ?, ?)",
                        [name, on, ", ".join(key)])
        for name, text in info["views"].items():
            con.execute("INSERT INTO _viewdef VALUES (?, ?)", [oid_of(name), _query_of(text)])
        for name, key in info["keys"].items():
            # A primary key: its constraint and the unique index it names (as PostgreSQL has
            # them; the index has no pg_class row, so psql's \di and \d list only twofold's
            # arrangements), for SQLAlchemy's get_pk_constraint and reflection.
            cols = [c for c, _, _ in info["columns"].get(name, [])]
            nums = [cols.index(k) + 1 for k in key if k in cols]
            if not nums:
                continue
            pkey = oid_of(f"{name}_pkey")
            con.execute(
                "INSERT INTO pg_index VALUES (?, ?, ?, ?, true, false, true, false, true, "
                "false, true, false, true, true, false, ?, ?, ?, ?, NULL, NULL)",
                [pkey, oid_of(name), len(nums), len(nums), nums, [0] * len(nums),
                 [_OPCLASS] * len(nums), " ".join("0" * len(nums))])
            con.execute(
                "INSERT INTO pg_constraint VALUES (?, ?, 2200, 'p', false, false, true, ?, 0, "
                "?, 0, 0, ' ', ' ', ' ', true, 0, true, ?, NULL, NULL)",
                [pkey + 1, f"{name}_pkey", oid_of(name), pkey, nums])

    def query(self, sql: str, params: list[Any],
              live: dict[str, list[tuple[Any, ...]]] | None = None
              ) -> tuple[list[tuple[str, str]], list[Any]]:
        """Run `sql`, first replacing the rows of the (monitoring) relations in `live`."""
        with self.lock:
            for name, rows in (live or {}).items():
                self.con.execute(f"DELETE FROM {name}")
                if rows:
                    marks = ", ".join("?" * len(rows[0]))
                    self.con.executemany(f"INSERT INTO {name} VALUES ({marks})", rows)
            cur = self.con.execute(sql, params or None)
            desc = cur.description or []
            rows = cur.fetchall()
        cols = [(d[0], _named_type(d[0], str(d[1])) or _scalar(str(d[1]))) for d in desc]
        return cols, [tuple(_value(v) for v in r) for r in rows]


_CHAR_COLUMNS = frozenset({
    "relpersistence", "relkind", "relreplident", "typtype", "typcategory", "typdelim",
    "typalign", "typstorage", "attalign", "attstorage", "attcompression", "attidentity",
    "attgenerated", "contype", "confupdtype", "confdeltype", "confmatchtype", "prokind",
    "provolatile", "proparallel", "amtype", "datlocprovider", "tgenabled", "ev_type",
    "ev_enabled", "polcmd", "collprovider", "castcontext", "castmethod"})
"""Catalog columns of PostgreSQL's one-byte type "char" (OID 18; asyncpg reads it as bytes)."""


def _named_type(name: str, duck: str) -> str | None:
    """The wire type of a catalog query's text column that PostgreSQL types otherwise, by its
    name: `indoption` an int2vector (PostgreSQL's "0 0" form, OID 22), the "char" ones."""
    if duck != "VARCHAR":
        return None
    if name == "indoption":
        return "int2vector"
    return "char" if name in _CHAR_COLUMNS else None


_VIEW_HEAD = re.compile(r"^\s*create\s+(?:or\s+replace\s+)?(?:materialized\s+)?view\s+"
                        r"(?:if\s+not\s+exists\s+)?(?:\"(?:[^\"]|\"\")*\"|[\w.]+)\s*"
                        r"(?:\([^)]*\)\s*)?as\s+", re.I | re.S)


def _query_of(text: str) -> str:
    """A view's definition as pg_get_viewdef gives it: the query, not the CREATE statement."""
    return _VIEW_HEAD.sub("", text, count=1).rstrip().rstrip(";")


def _declared(db: Any, name: str, cols: list[tuple[str, str, bool]]
              ) -> list[tuple[str, str, bool]]:
    """An object's columns typed as declared (`int4`, `varchar(10)`, `numeric`;
    `Entry.pg_types`: a table's, or what a SQL view, materialized view or index recorded of
    its query's), where the catalog recorded them; the engine scalars otherwise (API objects,
    older catalogs)."""
    entry = getattr(db, "_entries", {}).get(name)
    declared = list(getattr(entry, "pg_types", None) or [])
    if len(declared) != len(cols):
        return cols
    return [(c, t, n) for (c, _, n), t in zip(cols, declared, strict=True)]


def _oid(t: str) -> int:
    """The type OID of a column typed `t` (an engine scalar or a declared type)."""
    return OIDS.get(t.split("(")[0], 25)


_EXTENDED = frozenset({TEXT, BYTEA, VARCHAR, BPCHAR, NUMERIC})


def _storage(t: str) -> str:
    """PostgreSQL's `attstorage`: `x` (extended) for a variable-length type, else `p`."""
    return "x" if _oid(t) in _EXTENDED else "p"


def _length(t: str) -> int | None:
    """The declared length `n` of a `varchar(n)`/`bpchar(n)` column, else None."""
    limit = char_limit(t)
    return None if limit is None else limit[1]


def _typmod(t: str) -> int:
    """PostgreSQL's `atttypmod`: a `varchar(n)`/`char(n)` column's `n + 4`, else -1."""
    n = _length(t)
    return -1 if n is None else n + 4


def _format(t: str) -> str:
    """`format_type(oid, typmod)` of a column typed `t`: `character varying(10)`."""
    n = _length(t)
    name = _FORMAT.get(_oid(t), "text")
    return name if n is None else f"{name}({n})"


def _typname(oid: int) -> str:
    return next((n for o, n, *_ in _TYPES if o == oid), "text")


def _scalar(duck: str) -> str:
    d = duck.upper()
    if d.endswith("[]"):  # a one-dimensional array of one of the scalars below
        element = _scalar(d[:-2])
        return f"{element}[]" if element in ("bool", "int", "float", "str", "oid") else \
            "str[]"
    if d in ("BOOLEAN", "BOOL"):
        return "bool"
    if d == "UINTEGER":  # a column of PostgreSQL's type oid (pg_attribute.atttypid)
        return "oid"
    if d in ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "HUGEINT", "UBIGINT",
             "USMALLINT", "UTINYINT", "NUMBER"):
        return "int"
    if d in ("DOUBLE", "FLOAT", "REAL") or d.startswith("DECIMAL"):
        return "float"
    if d == "BLOB":
        return "bytes"
    return "str"


def _value(v: Any) -> Any:
    if isinstance(v, list):
        return [None if x is None else x if isinstance(x, bool | int | float | str) else str(x)
                for x in v]
    if v is None or isinstance(v, bool | int | float | str | bytes):
        return v
    return str(v)


def _regclass(m: re.Match[str]) -> str:
    """`'name'::regclass` (psql's `\\sv`, `\\ev` look a relation up so): its pg_class oid
    (NULL where there is none), the name read as PostgreSQL reads it (quotes, case, schema)."""
    text = m.group(1).replace("''", "'")
    parts = [p[1:-1].replace('""', '"') if p.startswith('"') else p.lower()
             for p in re.findall(r'"(?:[^"]|"")*"|[^."]+', text)]
    name = parts[-1] if parts and (len(parts) == 1 or parts[0] in ("public", "pg_catalog")) \
        else ""
    return "to_regclass('" + name.replace("'", "''") + "')"


_REWRITES: list[tuple[re.Pattern[str], Any]] = [
    (re.compile(r"'((?:[^']|'')*)'\s*::\s*(?:pg_catalog\.)?regclass\b", re.I), _regclass),
    # an array holding a value (DuckDB has no `= ANY (list)`)
    (re.compile(r"('(?:[^']|'')*')\s*=\s*ANY\s*\(\s*([\w.]+)\s*\)", re.I),
     r"list_contains(\2, \1)"),
    (re.compile(r"OPERATOR\s*\(\s*pg_catalog\.([~!=<>]+)\s*\)", re.I), r"\1"),
    (re.compile(r"\s+COLLATE\s+pg_catalog\.\"?\w+\"?", re.I), ""),
    (re.compile(r"::\s*(pg_catalog\.)?(regclass|regtype|regproc|regnamespace|regprocedure|"
                r"oid|name|char|\"char\")\b(\[\])?", re.I), ""),
    (re.compile(r"\bCAST\s*\(\s*'(?:pg_catalog\.)?(\w+)'\s+AS\s+REGCLASS\s*\)", re.I),
     r"to_regclass('\1')"),  # a catalog's own oid (none: NULL), not a string to compare
    (re.compile(r"\bAS\s+REGCLASS\s*\)", re.I), "AS VARCHAR)"),
    (re.compile(r"\bAS\s+(OID|REGTYPE)\s*\)", re.I), "AS BIGINT)"),
    (re.compile(r"\binformation_schema\.(tables|columns)\b", re.I), r"information_schema_\1"),
    (re.compile(r"\bpg_catalog\.", re.I), ""),
    # the server's settings (DuckDB's current_setting reads DuckDB's own)
    (re.compile(r"\bcurrent_setting\s*\(", re.I), "_current_setting("),
    (re.compile(r"\$(\d+)"), r"$\1"),
]


def rewrite(sql: str) -> str:
    for pattern, repl in _REWRITES:
        sql = pattern.sub(repl, sql)
    return sql


_lock = threading.Lock()
_snapshots: dict[int, tuple[Any, _Snapshot]] = {}
_BACKEND_PID = re.compile(r"\b(?:pg_catalog\.)?pg_backend_pid\s*\(\s*\)", re.I)


async def run(db: Any, sql: str, params: list[Any],
              session: Any = None) -> tuple[list[tuple[str, str]], list[Any]]:
    key, info = _describe(db)
    with _lock:
        cached = _snapshots.get(id(db))
        if cached is None or cached[0] != key:
            cached = (key, _Snapshot(info))
            _snapshots[id(db)] = cached
    snapshot = cached[1]
    text = rewrite(sql)
    if session is not None:  # the asking session's process id (pg_stat_activity's pid)
        text = _BACKEND_PID.sub(str(int(session.pid)), text)
    names = monitoring.mentioned(sql)
    live = await monitoring.collect(db, names) if names else None
    try:
        return await asyncio.to_thread(snapshot.query, text, list(params), live)
    except Exception as e:
        raise FeatureNotSupported(f"this catalog query is not supported ({e}); "
                                  f"query: {sql[:300]!r}") from None
