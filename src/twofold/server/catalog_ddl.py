"""The DDL of the catalog relations `catalog` serves from DuckDB: `pg_catalog`'s tables with
PostgreSQL 15's names and columns (those psql's backslash commands, SQLAlchemy's `inspect()`,
asyncpg's type introspection and JDBC tools read), `information_schema`'s tables and columns,
twofold's own relations, and the PostgreSQL functions those queries call as DuckDB macros.

Contract: `DDL` creates them all (empty: `catalog` fills them from twofold's catalog);
`TYPES` are the types `pg_type` holds (oid, name, length, category, array type's oid) and
`FORMAT` is `format_type`'s name of each. twofold has no user functions, roles besides
`twofold`, extensions, foreign servers, event triggers or tablespaces of its own: those
relations exist with PostgreSQL's columns so that psql's `\\df`, `\\du`, `\\dx`, `\\des`,
`\\dy`, `\\db`, `\\dL` list what there is (nothing, or the built-in rows), as a fresh
PostgreSQL database does.
"""

from __future__ import annotations

from twofold.server import monitoring

TYPES = [  # oid, name, len, category, array oid
    (16, "bool", 1, "B", 1000), (17, "bytea", -1, "U", 1001), (19, "name", 64, "S", 1003),
    (20, "int8", 8, "N", 1016), (21, "int2", 2, "N", 1005), (23, "int4", 4, "N", 1007),
    (25, "text", -1, "S", 1009), (26, "oid", 4, "N", 1028), (700, "float4", 4, "N", 1021),
    (701, "float8", 8, "N", 1022), (705, "unknown", -2, "X", 0),
    (1042, "bpchar", -1, "S", 1014), (1043, "varchar", -1, "S", 1015),
    (1700, "numeric", -1, "N", 1231), (2205, "regclass", 4, "N", 2210),
    (1114, "timestamp", 8, "D", 1115), (1184, "timestamptz", 8, "D", 1185),
    (18, "char", 1, "Z", 1002),
]
FORMAT = {16: "boolean", 17: "bytea", 19: "name", 20: "bigint", 21: "smallint",
           23: "integer", 25: "text", 26: "oid", 700: "real", 701: "double precision",
           705: "unknown", 1042: "character", 1043: "character varying", 1700: "numeric",
           1114: "timestamp without time zone", 1184: "timestamp with time zone", 18: '"char"'}

DDL = """
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
CREATE TABLE pg_attribute (attrelid BIGINT, attname VARCHAR, atttypid UINTEGER,
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
CREATE TABLE pg_publication (oid BIGINT, pubname VARCHAR, pubowner BIGINT,
  puballtables BOOLEAN, pubinsert BOOLEAN, pubupdate BOOLEAN, pubdelete BOOLEAN,
  pubtruncate BOOLEAN, pubviaroot BOOLEAN);
CREATE TABLE pg_subscription (oid BIGINT, subdbid BIGINT, subskiplsn VARCHAR, subname VARCHAR,
  subowner BIGINT, subenabled BOOLEAN, subbinary BOOLEAN, substream VARCHAR,
  subtwophasestate VARCHAR, subdisableonerr BOOLEAN, subconninfo VARCHAR,
  subslotname VARCHAR, subsynccommit VARCHAR, subpublications VARCHAR[]);
CREATE TABLE pg_db_role_setting (setdatabase BIGINT, setrole BIGINT, setconfig VARCHAR[]);
CREATE TABLE pg_statistic_ext_data (stxoid BIGINT, stxdinherit BOOLEAN, stxdndistinct VARCHAR,
  stxddependencies VARCHAR, stxdmcv VARCHAR, stxdexpr VARCHAR);
CREATE TABLE pg_publication_rel (oid BIGINT, prpubid BIGINT, prrelid BIGINT, prqual VARCHAR,
  prattrs SMALLINT[]);
CREATE TABLE pg_publication_namespace (oid BIGINT, pnpubid BIGINT, pnnspid BIGINT);
CREATE TABLE pg_rewrite (oid BIGINT, rulename VARCHAR, ev_class BIGINT);
CREATE TABLE pg_collation (oid BIGINT, collname VARCHAR, collnamespace BIGINT);
CREATE TABLE pg_tablespace (oid BIGINT, spcname VARCHAR, spcowner BIGINT, spcacl VARCHAR,
  spcoptions VARCHAR[]);
CREATE TABLE pg_foreign_table (ftrelid BIGINT, ftserver BIGINT);
CREATE TABLE pg_partitioned_table (partrelid BIGINT);
CREATE TABLE pg_extension (oid BIGINT, extname VARCHAR, extowner BIGINT,
  extnamespace BIGINT, extrelocatable BOOLEAN, extversion VARCHAR, extconfig BIGINT[],
  extcondition VARCHAR[]);
CREATE TABLE pg_enum (oid BIGINT, enumtypid BIGINT, enumsortorder DOUBLE, enumlabel VARCHAR);
CREATE TABLE pg_range (rngtypid BIGINT, rngsubtype BIGINT, rngmultitypid BIGINT,
  rngcollation BIGINT, rngsubopc BIGINT, rngcanonical VARCHAR, rngsubdiff VARCHAR);
CREATE TABLE pg_proc (oid BIGINT, proname VARCHAR, pronamespace BIGINT, proowner BIGINT,
  prolang BIGINT, procost DOUBLE, prorows DOUBLE, provariadic BIGINT, prosupport VARCHAR,
  prokind VARCHAR, prosecdef BOOLEAN, proleakproof BOOLEAN, proisstrict BOOLEAN,
  proretset BOOLEAN, provolatile VARCHAR, proparallel VARCHAR, pronargs INTEGER,
  pronargdefaults INTEGER, prorettype BIGINT, proargtypes VARCHAR, proallargtypes BIGINT[],
  proargmodes VARCHAR[], proargnames VARCHAR[], proargdefaults VARCHAR, protrftypes BIGINT[],
  prosrc VARCHAR, probin VARCHAR, prosqlbody VARCHAR, proconfig VARCHAR[], proacl VARCHAR);
CREATE TABLE pg_auth_members (oid BIGINT, roleid BIGINT, member BIGINT, grantor BIGINT,
  admin_option BOOLEAN);
CREATE TABLE pg_language (oid BIGINT, lanname VARCHAR, lanowner BIGINT, lanispl BOOLEAN,
  lanpltrusted BOOLEAN, lanplcallfoid BIGINT, laninline BIGINT, lanvalidator BIGINT,
  lanacl VARCHAR, tableoid BIGINT DEFAULT 2612);
CREATE TABLE pg_event_trigger (oid BIGINT, evtname VARCHAR, evtevent VARCHAR, evtowner BIGINT,
  evtfoid BIGINT, evtenabled VARCHAR, evttags VARCHAR[]);
CREATE TABLE pg_foreign_data_wrapper (oid BIGINT, fdwname VARCHAR, fdwowner BIGINT,
  fdwhandler BIGINT, fdwvalidator BIGINT, fdwacl VARCHAR, fdwoptions VARCHAR[]);
CREATE TABLE pg_foreign_server (oid BIGINT, srvname VARCHAR, srvowner BIGINT, srvfdw BIGINT,
  srvtype VARCHAR, srvversion VARCHAR, srvacl VARCHAR, srvoptions VARCHAR[]);
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
CREATE MACRO format_type(t, m) AS CASE WHEN t IN (1042, 1043) AND m >= 4 THEN
  (CASE t WHEN 1042 THEN 'character' ELSE 'character varying' END) || '(' || (m - 4) || ')'
  ELSE CASE t @FORMAT@ ELSE 'text' END END;
CREATE TABLE _settings (name VARCHAR, setting VARCHAR);
CREATE MACRO _current_setting(x) AS (SELECT min(setting) FROM _settings
  WHERE lower(name) = lower(x)), (x, y) AS (SELECT min(setting) FROM _settings
  WHERE lower(name) = lower(x));
CREATE MACRO pg_get_userbyid(x) AS 'twofold';
CREATE MACRO array_remove(a, x) AS list_filter(a, lambda e: e IS DISTINCT FROM x);
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
CREATE MACRO pg_statistics_obj_is_visible(x) AS true;
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
CREATE MACRO pg_function_is_visible(x) AS true;
CREATE MACRO pg_get_function_result(x) AS (SELECT format_type(prorettype, NULL) FROM pg_proc
  WHERE oid = x);
CREATE MACRO pg_get_function_arguments(x) AS '';
CREATE MACRO pg_get_function_identity_arguments(x) AS '';
CREATE MACRO pg_get_functiondef(x) AS NULL;
CREATE MACRO pg_get_function_sqlbody(x) AS NULL;
CREATE MACRO pg_tablespace_location(x) AS '';
CREATE MACRO array_length(x, y) AS len(x);
CREATE MACRO array_upper(x, y) AS len(x);
CREATE MACRO array_lower(x, y) AS 1;
CREATE MACRO current_schemas(x) AS ['public'];
""".replace("@FORMAT@", " ".join(f"WHEN {o} THEN '{n}'" for o, n in FORMAT.items())).replace(
    "@MONITORING@", monitoring.DDL)
