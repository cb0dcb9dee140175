"""Catalog relations for tools: the parts of `pg_catalog` and `information_schema` that psql
(`\\dt`, `\\d NAME`, `\\di`, `\\dv`, `\\dm`), SQLAlchemy's `inspect()`, asyncpg and JDBC tools
read, plus twofold's own `mz_catalog`-style relations (`twofold_objects`, `twofold_columns`,
`twofold_indexes`) and monitoring relations (`monitoring`: frontiers, lag, arrangement sizes,
peek and step durations).

Contract: `is_catalog_query(sql)` says whether a statement reads these relations (it names a
`pg_` relation, `pg_catalog.`, `information_schema.` or `twofold_`); `run(db, sql, params)`
answers it from a snapshot of twofold's catalog (tables, views, materialized views, indexes,
their columns and types) loaded into an in-memory DuckDB database whose tables have
PostgreSQL's catalog names and columns, after rewriting the PostgreSQL-only spellings psql uses
(`OPERATOR(pg_catalog.~)`, `COLLATE pg_catalog.default`, `::regclass`). The snapshot is rebuilt
when the catalog changes; the monitoring relations a query names are refilled, live, for
that query (under the snapshot's lock, so concurrent queries each see their own complete
rows). Result columns are typed as the engine's scalars. A catalog query
DuckDB cannot run is an error naming the query (`0A000`), never a wrong answer from a user
table: user relations are empty in the snapshot and are never queried there.
"""

from __future__ import annotations

import asyncio
import re
import threading
import zlib
from typing import Any

from twofold.server import monitoring
from twofold.server.shims import DEFAULTS
from twofold.server.types import OIDS
from twofold.sql.errors import FeatureNotSupported

_CATALOG = re.compile(r"\b(pg_catalog\.|information_schema\.|pg_(class|type|namespace|attribute|"
                      r"index|indexes|database|settings|am|proc|description|attrdef|constraint|"
                      r"roles|user|tables|views|matviews|inherits|trigger|collation|"
                      r"tablespace|policy|range|enum|extension|opclass)\b|twofold_(objects|columns|"
                      r"indexes|frontiers|lag|arrangement_sizes|peek_durations|"
                      r"step_durations)\b)", re.I)

PUBLIC, PG_CATALOG, INFO_SCHEMA = 2200, 11, 13183
_TYPES = [  # oid, name, len, category, array oid
    (16, "bool", 1, "B", 1000), (17, "bytea", -1, "U", 1001), (19, "name", 64, "S", 1003),
    (20, "int8", 8, "N", 1016), (21, "int2", 2, "N", 1005), (23, "int4", 4, "N", 1007),
    (25, "text", -1, "S", 1009), (26, "oid", 4, "N", 1028), (700, "float4", 4, "N", 1021),
    (701, "float8", 8, "N", 1022), (705, "unknown", -2, "X", 0),
    (1042, "bpchar", -1, "S", 1014), (1043, "varchar", -1, "S", 1015),
    (1700, "numeric", -1, "N", 1231), (2205, "regclass", 4, "N", 2210),
    (1114, "timestamp", 8, "D", 1115), (1184, "timestamptz", 8, "D", 1185),
]
_FORMAT = {16: "boolean", 17: "bytea", 19: "name", 20: "bigint", 21: "smallint",
           23: "integer", 25: "text", 26: "oid", 700: "real", 701: "double precision",
           705: "unknown", 1042: "character", 1043: "character varying", 1700: "numeric",
           1114: "timestamp without time zone", 1184: "timestamp with time zone"}

_DDL = """
CREATE TABLE pg_namespace (oid BIGINT, nspname VARCHAR, nspowner BIGINT, nspacl VARCHAR);
CREATE TABLE pg_class (oid BIGINT, relname VARCHAR, relnamespace BIGINT, reltype BIGINT,
  reloftype BIGINT, relowner BIGINT, relam BIGINT, relfilenode BIGINT, reltablespace BIGINT,
  relpages INTEGER, reltuples DOUBLE, relallvisible INTEGER, reltoastrelid BIGINT,
  relhasindex BOOLEAN, relisshared BOOLEAN, relpersistence VARCHAR, relkind VARCHAR,
  relnatts INTEGER, relchecks INTEGER, relhasrules BOOLEAN, relhastriggers BOOLEAN,
  relhassubclass BOOLEAN, relrowsecurity BOOLEAN, relforcerowsecurity BOOLEAN,
  relispopulated BOOLEAN, relreplident VARCHAR, relispartition BOOLEAN, relrewrite BIGINT,
  relfrozenxid BIGINT, relminmxid BIGINT, relacl VARCHAR, reloptions VARCHAR[],
  relpartbound VARCHAR);
CREATE TABLE pg_attribute (attrelid BIGINT, attname VARCHAR, atttypid BIGINT,
  attstattarget INTEGER, attlen INTEGER, attnum INTEGER, attndims INTEGER, attcacheoff INTEGER,
  atttypmod INTEGER, attbyval BOOLEAN, attalign VARCHAR, attstorage VARCHAR,
  attcompression VARCHAR, attnotnull BOOLEAN, atthasdef BOOLEAN, atthasmissing BOOLEAN,
  attidentity VARCHAR, attgenerated VARCHAR, attisdropped BOOLEAN, attislocal BOOLEAN,
  attinhcount INTEGER, attcollation BIGINT, attacl VARCHAR, attoptions VARCHAR[],
  attfdwoptions VARCHAR[], attmissingval VARCHAR);
CREATE TABLE pg_type (oid BIGINT, typname VARCHAR, typnamespace BIGINT, typowner BIGINT,
  typlen INTEGER, typbyval BOOLEAN, typtype VARCHAR, typcategory VARCHAR,
  typispreferred BOOLEAN, typisdefined BOOLEAN, typdelim VARCHAR, typrelid BIGINT,
  typsubscript BIGINT, typelem BIGINT, typarray BIGINT, typinput VARCHAR, typoutput VARCHAR,
  typreceive VARCHAR, typsend VARCHAR, typmodin VARCHAR, typmodout VARCHAR,
  typanalyze VARCHAR, typalign VARCHAR, typstorage VARCHAR, typnotnull BOOLEAN,
  typbasetype BIGINT, typtypmod INTEGER, typndims INTEGER, typcollation BIGINT,
  typdefaultbin VARCHAR, typdefault VARCHAR, typacl VARCHAR);
CREATE TABLE pg_index (indexrelid BIGINT, indrelid BIGINT, indnatts INTEGER,
  indnkeyatts INTEGER, indisunique BOOLEAN, indnullsnotdistinct BOOLEAN, indisprimary BOOLEAN,
  indisexclusion BOOLEAN, indimmediate BOOLEAN, indisclustered BOOLEAN, indisvalid BOOLEAN,
  indcheckxmin BOOLEAN, indisready BOOLEAN, indislive BOOLEAN, indisreplident BOOLEAN,
  indkey SMALLINT[], indcollation BIGINT[], indclass BIGINT[], indoption VARCHAR,
  indexprs VARCHAR, indpred VARCHAR);
CREATE TABLE pg_opclass (oid BIGINT, opcmethod BIGINT, opcname VARCHAR, opcnamespace BIGINT,
  opcowner BIGINT, opcfamily BIGINT, opcintype BIGINT, opcdefault BOOLEAN, opckeytype BIGINT);
CREATE TABLE pg_am (oid BIGINT, amname VARCHAR, amhandler VARCHAR, amtype VARCHAR);
CREATE TABLE pg_attrdef (oid BIGINT, adrelid BIGINT, adnum INTEGER, adbin VARCHAR);
CREATE TABLE pg_constraint (oid BIGINT, conname VARCHAR, connamespace BIGINT, contype VARCHAR,
  condeferrable BOOLEAN, condeferred BOOLEAN, convalidated BOOLEAN, conrelid BIGINT,
  contypid BIGINT, conindid BIGINT, conparentid BIGINT, confrelid BIGINT,
  confupdtype VARCHAR, confdeltype VARCHAR, confmatchtype VARCHAR, conislocal BOOLEAN,
  coninhcount INTEGER, connoinherit BOOLEAN, conkey INTEGER[], confkey INTEGER[],
  conbin VARCHAR);
CREATE TABLE pg_database (oid BIGINT, datname VARCHAR, datdba BIGINT, encoding INTEGER,
  datlocprovider VARCHAR, datistemplate BOOLEAN, datallowconn BOOLEAN, datconnlimit INTEGER,
  dattablespace BIGINT, datcollate VARCHAR, datctype VARCHAR, daticulocale VARCHAR,
  datcollversion VARCHAR, datacl VARCHAR);
CREATE TABLE pg_settings (name VARCHAR, setting VARCHAR, unit VARCHAR, category VARCHAR,
  short_desc VARCHAR, extra_desc VARCHAR, context VARCHAR, vartype VARCHAR, source VARCHAR,
  min_val VARCHAR, max_val VARCHAR, enumvals VARCHAR[], boot_val VARCHAR, reset_val VARCHAR,
  sourcefile VARCHAR, sourceline INTEGER, pending_restart BOOLEAN);
CREATE TABLE pg_description (objoid BIGINT, classoid BIGINT, objsubid INTEGER,
  description VARCHAR);
CREATE TABLE pg_roles (oid BIGINT, rolname VARCHAR, rolsuper BOOLEAN, rolinherit BOOLEAN,
  rolcreaterole BOOLEAN, rolcreatedb BOOLEAN, rolcanlogin BOOLEAN, rolreplication BOOLEAN,
  rolconnlimit INTEGER, rolpassword VARCHAR, rolvaliduntil VARCHAR, rolbypassrls BOOLEAN,
  rolconfig VARCHAR[]);
CREATE TABLE pg_inherits (inhrelid BIGINT, inhparent BIGINT, inhseqno INTEGER,
  inhdetachpending BOOLEAN);
CREATE TABLE pg_trigger (oid BIGINT, tgrelid BIGINT, tgname VARCHAR, tgenabled VARCHAR,
  tgisinternal BOOLEAN, tgparentid BIGINT);
CREATE TABLE pg_policy (oid BIGINT, polname VARCHAR, polrelid BIGINT, polcmd VARCHAR,
  polpermissive BOOLEAN, polroles BIGINT[], polqual VARCHAR, polwithcheck VARCHAR);
CREATE TABLE pg_statistic_ext (oid BIGINT, stxrelid BIGINT, stxname VARCHAR,
  stxnamespace BIGINT, stxowner BIGINT, stxstattarget INTEGER, stxkeys VARCHAR,
  stxkind VARCHAR[]);
CREATE TABLE pg_publication (oid BIGINT, pubname VARCHAR, puballtables BOOLEAN);
CREATE TABLE pg_publication_rel (oid BIGINT, prpubid BIGINT, prrelid BIGINT, prqual VARCHAR,
  prattrs SMALLINT[]);
CREATE TABLE pg_publication_namespace (oid BIGINT, pnpubid BIGINT, pnnspid BIGINT);
CREATE TABLE pg_rewrite (oid BIGINT, rulename VARCHAR, ev_class BIGINT);
CREATE TABLE pg_collation (oid BIGINT, collname VARCHAR, collnamespace BIGINT);
CREATE TABLE pg_tablespace (oid BIGINT, spcname VARCHAR);
CREATE TABLE pg_foreign_table (ftrelid BIGINT, ftserver BIGINT);
CREATE TABLE pg_partitioned_table (partrelid BIGINT);
CREATE TABLE pg_extension (oid BIGINT, extname VARCHAR, extversion VARCHAR);
CREATE TABLE pg_enum (oid BIGINT, enumtypid BIGINT, enumsortorder DOUBLE, enumlabel VARCHAR);
CREATE TABLE pg_range (rngtypid BIGINT, rngsubtype BIGINT);
CREATE TABLE pg_proc (oid BIGINT, proname VARCHAR, pronamespace BIGINT);
CREATE TABLE pg_sequence (seqrelid BIGINT, seqtypid BIGINT, seqstart BIGINT,
  seqincrement BIGINT, seqmax BIGINT, seqmin BIGINT, seqcache BIGINT, seqcycle BOOLEAN);
CREATE TABLE _indexdef (oid BIGINT, def VARCHAR);
CREATE TABLE _viewdef (oid BIGINT, def VARCHAR);
CREATE TABLE information_schema_tables (table_catalog VARCHAR, table_schema VARCHAR,
  table_name VARCHAR, table_type VARCHAR, is_insertable_into VARCHAR);
CREATE TABLE information_schema_columns (table_catalog VARCHAR, table_schema VARCHAR,
  table_name VARCHAR, column_name VARCHAR, ordinal_position INTEGER, column_default VARCHAR,
  is_nullable VARCHAR, data_type VARCHAR, character_maximum_length INTEGER,
  numeric_precision INTEGER, udt_name VARCHAR);
CREATE TABLE twofold_objects (name VARCHAR, type VARCHAR, oid BIGINT);
CREATE TABLE twofold_columns (object VARCHAR, name VARCHAR, position INTEGER, type VARCHAR,
  nullable BOOLEAN);
CREATE TABLE twofold_indexes (name VARCHAR, "on" VARCHAR, key VARCHAR);
@MONITORING@CREATE VIEW pg_tables AS SELECT n.nspname AS schemaname, c.relname AS tablename,
  'twofold' AS tableowner, NULL AS tablespace, c.relhasindex AS hasindexes,
  false AS hasrules, false AS hastriggers, false AS rowsecurity
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r';
CREATE VIEW pg_views AS SELECT 'public' AS schemaname, c.relname AS viewname,
  'twofold' AS viewowner, d.def AS definition FROM pg_class c JOIN _viewdef d ON d.oid = c.oid
  WHERE c.relkind = 'v';
CREATE VIEW pg_matviews AS SELECT 'public' AS schemaname, c.relname AS matviewname,
  'twofold' AS matviewowner, NULL AS tablespace, c.relhasindex AS hasindexes,
  true AS ispopulated, d.def AS definition FROM pg_class c LEFT JOIN _viewdef d ON d.oid = c.oid
  WHERE c.relkind = 'm';
CREATE VIEW pg_indexes AS SELECT 'public' AS schemaname, t.relname AS tablename,
  c.relname AS indexname, NULL AS tablespace, d.def AS indexdef
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid
  JOIN _indexdef d ON d.oid = i.indexrelid;
CREATE VIEW pg_user AS SELECT rolname AS usename, oid AS usesysid, rolcreatedb AS usecreatedb,
  rolsuper AS usesuper FROM pg_roles;
CREATE MACRO format_type(t, m) AS CASE t @FORMAT@ ELSE 'text' END;
CREATE TABLE _settings (name VARCHAR, setting VARCHAR);
CREATE MACRO _current_setting(x) AS (SELECT min(setting) FROM _settings
  WHERE lower(name) = lower(x)), (x, y) AS (SELECT min(setting) FROM _settings
  WHERE lower(name) = lower(x));
CREATE MACRO pg_get_userbyid(x) AS 'twofold';
CREATE MACRO to_regtype(x) AS (SELECT min(oid) FROM pg_type WHERE typname = x);
CREATE MACRO to_regclass(x) AS (SELECT min(oid) FROM pg_class WHERE relname = x);
CREATE MACRO pg_table_is_visible(x) AS true;
CREATE MACRO pg_type_is_visible(x) AS true;
CREATE MACRO pg_get_expr(x, y) AS x, (x, y, z) AS x;
CREATE MACRO pg_get_indexdef(x) AS (SELECT def FROM _indexdef WHERE oid = x),
  (x, y, z) AS CASE WHEN y = 0 THEN (SELECT def FROM _indexdef WHERE oid = x)
    ELSE (SELECT attname FROM pg_attribute WHERE attrelid = x AND attnum = y) END;
CREATE MACRO pg_get_viewdef(x) AS (SELECT def FROM _viewdef WHERE oid = x),
  (x, y) AS (SELECT def FROM _viewdef WHERE oid = x);
CREATE MACRO pg_get_constraintdef(x) AS NULL, (x, y) AS NULL;
CREATE MACRO pg_get_partkeydef(x) AS NULL;
CREATE MACRO pg_get_statisticsobjdef_columns(x) AS NULL;
CREATE MACRO pg_relation_is_publishable(x) AS false;
CREATE MACRO pg_relation_size(x) AS 0;
CREATE MACRO pg_total_relation_size(x) AS 0;
CREATE MACRO pg_table_size(x) AS 0;
CREATE MACRO pg_size_pretty(x) AS '0 bytes';
CREATE MACRO pg_encoding_to_char(x) AS 'UTF8';
CREATE MACRO obj_description(x) AS NULL, (x, y) AS NULL;
CREATE MACRO col_description(x, y) AS NULL;
CREATE MACRO shobj_description(x, y) AS NULL;
CREATE MACRO has_table_privilege(x, y) AS true, (x, y, z) AS true;
CREATE MACRO has_schema_privilege(x, y) AS true, (x, y, z) AS true;
CREATE MACRO has_database_privilege(x, y) AS true;
CREATE MACRO pg_has_role(x, y) AS true, (x, y, z) AS true;
CREATE MACRO pg_is_other_temp_schema(x) AS false;
CREATE MACRO pg_my_temp_schema() AS 0;
CREATE MACRO pg_get_serial_sequence(x, y) AS NULL;
CREATE MACRO quote_ident(x) AS x;
CREATE MACRO pg_collation_is_visible(x) AS true;
CREATE MACRO json_build_object(a, b) AS NULL,
  (a, b, c, d) AS NULL,
  (a, b, c, d, e, f) AS NULL,
  (a, b, c, d, e, f, g, h) AS NULL,
  (a, b, c, d, e, f, g, h, i, j) AS NULL,
  (a, b, c, d, e, f, g, h, i, j, k, l) AS NULL,
  (a, b, c, d, e, f, g, h, i, j, k, l, m, n) AS NULL,
  (a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p) AS NULL;
CREATE MACRO array_length(x, y) AS len(x);
CREATE MACRO array_upper(x, y) AS len(x);
CREATE MACRO array_lower(x, y) AS 1;
CREATE MACRO current_schemas(x) AS ['public'];
""".replace("@FORMAT@", " ".join(f"WHEN {o} THEN '{n}'" for o, n in _FORMAT.items())).replace(
    "@MONITORING@", monitoring.DDL)


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
                             if k == "view"}
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
                "(?, ?, ?, -1, -1, ?, 0, -1, -1, false, 'i', 'p', '', ?, false, false, '', '', "
                "false, true, 0, 0)",
                [(oid, c, OIDS.get(s, 25), i, not nullable)
                 for i, (c, s, nullable) in enumerate(cols, 1)])
            if kind != "index":
                con.execute("INSERT INTO information_schema_tables VALUES "
                            "('twofold', 'public', ?, ?, ?)",
                            [name, ttype[kind], "YES" if kind == "table" else "NO"])
                con.executemany(
                    "INSERT INTO information_schema_columns VALUES ('twofold', 'public', ?, ?, "
                    "?, NULL, ?, ?, NULL, NULL, ?)",
                    [(name, c, i, "YES" if nullable else "NO",
                      _FORMAT.get(OIDS.get(s, 25), "text"), _typname(OIDS.get(s, 25)))
                     for i, (c, s, nullable) in enumerate(cols, 1)])
            con.execute("INSERT INTO twofold_objects VALUES (?, ?, ?)", [name, kind, oid])
            con.executemany("INSERT INTO twofold_columns VALUES (?, ?, ?, ?, ?)",
                            [(name, c, i, _FORMAT.get(OIDS.get(s, 25), "text"), nullable)
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
        cols = [(d[0], "int2vector" if d[0] == "indoption" and str(d[1]) == "VARCHAR" else
                 _scalar(str(d[1]))) for d in desc]  # PostgreSQL's "0 0" form, OID 22
        return cols, [tuple(_value(v) for v in r) for r in rows]


_VIEW_HEAD = re.compile(r"^\s*create\s+(?:or\s+replace\s+)?(?:materialized\s+)?view\s+"
                        r"(?:if\s+not\s+exists\s+)?(?:\"(?:[^\"]|\"\")*\"|[\w.]+)\s*"
                        r"(?:\([^)]*\)\s*)?as\s+", re.I | re.S)


def _query_of(text: str) -> str:
    """A view's definition as pg_get_viewdef gives it: the query, not the CREATE statement."""
    return _VIEW_HEAD.sub("", text, count=1).rstrip().rstrip(";")


def _typname(oid: int) -> str:
    return next((n for o, n, *_ in _TYPES if o == oid), "text")


def _scalar(duck: str) -> str:
    d = duck.upper()
    if d.endswith("[]"):  # a one-dimensional array of one of the scalars below
        element = _scalar(d[:-2])
        return f"{element}[]" if element in ("bool", "int", "float", "str") else "str[]"
    if d in ("BOOLEAN", "BOOL"):
        return "bool"
    if d in ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "HUGEINT", "UBIGINT", "UINTEGER",
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


_REWRITES = [
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
    names = monitoring.mentioned(sql)
    live = await monitoring.collect(db, names) if names else None
    try:
        return await asyncio.to_thread(snapshot.query, text, list(params), live)
    except Exception as e:
        raise FeatureNotSupported(f"this catalog query is not supported ({e}); "
                                  f"query: {sql[:300]!r}") from None
