"""Session statements a PostgreSQL client sends that are not twofold SQL: transaction control,
`SET`/`SHOW`/`RESET` of session variables, and the one-function queries drivers probe with
(`select version()`, `current_schema()`, `current_database()`, `current_user`, ...).

Contract: `classify(sql)` names a transaction-control statement (`BEGIN`, `COMMIT`, `ROLLBACK`,
`SAVEPOINT`, `RELEASE`) or returns None. `Variables` holds one session's settings with
PostgreSQL's defaults; `set_statement`/`show_statement` parse `SET [SESSION|LOCAL] x = v | TO v`
and `SHOW x` (unknown variables: 42704). `probe(sql, session)` answers a `SELECT` of only shim
functions with `(columns, row)` (`pg_backend_pid()` is int4, the others text) or returns None.
"""

from __future__ import annotations

import re
from typing import Any

from twofold.sql.errors import InvalidParameter, SqlError, UndefinedObject

SERVER_VERSION = "15.0"
VERSION = f"PostgreSQL {SERVER_VERSION} (twofold) on x86_64-pc-linux-gnu, 64-bit"
DATABASE = "twofold"

DEFAULTS: dict[str, str] = {
    "server_version": SERVER_VERSION, "server_version_num": "150000",
    "server_encoding": "UTF8", "client_encoding": "UTF8", "DateStyle": "ISO, MDY",
    "integer_datetimes": "on", "standard_conforming_strings": "on", "TimeZone": "UTC",
    "IntervalStyle": "postgres", "is_superuser": "off", "application_name": "",
    "transaction_isolation": "serializable", "default_transaction_isolation": "serializable",
    "transaction_read_only": "off", "default_transaction_read_only": "off",
    "extra_float_digits": "1", "search_path": "public", "statement_timeout": "0",
    "lock_timeout": "0", "idle_in_transaction_session_timeout": "0", "bytea_output": "hex",
    "max_identifier_length": "63", "session_authorization": "twofold",
}  # fmt: skip
REPORTED = ("server_version", "server_encoding", "client_encoding", "DateStyle",
            "integer_datetimes", "standard_conforming_strings", "TimeZone", "IntervalStyle",
            "is_superuser", "application_name", "session_authorization")
_ALIASES = {"transaction isolation level": "transaction_isolation",
            "time zone": "TimeZone", "names": "client_encoding"}

_TXN = re.compile(r"^\s*(begin|start\s+transaction|commit|end|rollback|abort|savepoint|"
                  r"release|rollback\s+to)\b", re.I)
_SET = re.compile(r"^\s*set\s+(?:session\s+|local\s+)?(.+?)\s*(?:=|\s+to\s+|\s+)(.+?)\s*;?\s*$",
                  re.I | re.S)
_SET_TXN = re.compile(r"^\s*set\s+(session\s+characteristics\s+as\s+)?transaction\b", re.I)
_SHOW = re.compile(r"^\s*show\s+(.+?)\s*;?\s*$", re.I | re.S)
_RESET = re.compile(r"^\s*reset\s+(.+?)\s*;?\s*$", re.I | re.S)
_DISCARD = re.compile(r"^\s*(discard\s+all|deallocate\s+(all|\w+)|unlisten\s+\*)\s*;?\s*$",
                      re.I)


READ_ONLY = frozenset({"server_version", "server_version_num", "server_encoding",
                       "integer_datetimes", "is_superuser", "max_identifier_length"})
_UTF8 = frozenset({"utf8", "utf-8", "unicode"})
_ONLY = {"client_encoding": ("UTF8", _UTF8), "standard_conforming_strings": ("on", {"on", "true"}),
         "bytea_output": ("hex", {"hex"})}


class CantChange(SqlError):
    """`SET` of a variable fixed at server start (`55P02`)."""

    sqlstate = "55P02"


def check_setting(key: str, value: str) -> str:
    """The value `SET key = value` stores, or an error: a read-only variable is `55P02`; one
    whose other values the server would not honour (another client encoding, escapes in
    strings, another bytea output) is `22023` — never accepted and then ignored."""
    if key in READ_ONLY:
        raise CantChange(f"parameter \"{key}\" cannot be changed")
    if key in _ONLY:
        only, allowed = _ONLY[key]
        if value.strip().lower() not in allowed:
            raise InvalidParameter(f"parameter \"{key}\" can only be set to \"{only}\" "
                                   f"(got {value!r})")
        return only
    return value


class Variables:
    """One session's variables (names case-insensitive, reported with their canonical case)."""

    def __init__(self, user: str, startup: dict[str, str]) -> None:
        self._canon = {k.lower(): k for k in DEFAULTS}
        self.values: dict[str, str] = dict(DEFAULTS)
        self.values["session_authorization"] = user
        for k, v in startup.items():
            if k.lower() in self._canon or k in ("application_name",):
                self.set(k, v)

    def canonical(self, name: str) -> str:
        name = name.strip().strip('"')
        name = _ALIASES.get(name.lower(), name)
        return self._canon.get(name.lower(), name)

    def set(self, name: str, value: str) -> str:
        key = self.canonical(name)
        self._canon.setdefault(key.lower(), key)
        self.values[key] = value
        return key

    def get(self, name: str) -> tuple[str, str]:
        key = self.canonical(name)
        if key.lower() not in self._canon:
            raise UndefinedObject(f"unrecognized configuration parameter \"{name.strip()}\"")
        return key, self.values[key]

    def reset(self, name: str) -> None:
        key = self.canonical(name)
        if key in DEFAULTS:
            self.values[key] = DEFAULTS[key]


def classify(sql: str) -> str | None:
    m = _TXN.match(sql)
    if m is None:
        return None
    word = m.group(1).lower().split()[0]
    if word in ("begin", "start"):
        return "BEGIN"
    if word in ("commit", "end"):
        return "COMMIT"
    if word == "rollback" and re.match(r"^\s*rollback\s+(work\s+|transaction\s+)?to\b", sql, re.I):
        return "ROLLBACK"  # ROLLBACK TO SAVEPOINT keeps the transaction
    if word in ("rollback", "abort"):
        return "ROLLBACK"
    return word.upper()


_SERVER_WORDS = re.compile(r"^\s*(begin|start|commit|end|rollback|abort|savepoint|release|set|"
                          r"show|reset|discard|deallocate|unlisten|copy|declare|fetch|close)\b",
                          re.I)


_STARTS_STATEMENT = re.compile(r"^(\s|--[^\n]*\n|/\*.*?\*/)*[A-Za-z_(]", re.S)


def syntax_error(statements: list[str]) -> SqlError | None:
    """The first syntax error among a Query message's statements, before any runs — as
    PostgreSQL parses the whole message first (a misspelled keyword in the last statement
    stops the first, DDL included). Statements the server answers itself (transaction control,
    SET/SHOW, COPY, cursors, catalog queries for tools) are left to their own checks."""
    from twofold.server.catalog import is_catalog_query
    from twofold.sql.errors import SqlSyntaxError
    from twofold.sql.parser import parse

    for sql in statements:
        if not _STARTS_STATEMENT.match(sql):  # a statement starts with a keyword or `(`
            return SqlSyntaxError(f"syntax error at or near {sql.split()[0][:20]!r}")
        if _SERVER_WORDS.match(sql) or is_catalog_query(sql):
            continue
        try:
            parse(sql)  # kept: running the statement later does not parse it again
        except SqlSyntaxError as e:
            return e
        except Exception:
            continue  # not a syntax error: the statement reports it when it runs
    return None


def _value(raw: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] == "'":
        return raw[1:-1].replace("''", "'")
    return raw


def set_statement(sql: str, variables: Variables) -> tuple[str, str] | None:
    """`SET` → the (name, value) set, or None if `sql` is not a SET."""
    if _SET_TXN.match(sql):
        return ("transaction_isolation", variables.values["transaction_isolation"])
    m = _SET.match(sql)
    if m is None:
        return None
    name, value = m.group(1), _value(m.group(2))
    if value.lower() == "default":
        variables.reset(name)
        return name, variables.get(name)[1] if name.lower() in variables._canon else ""
    value = check_setting(variables.canonical(name), value)
    return variables.set(name, value), value


SHOW_ALL_COLUMNS = [("name", "str"), ("setting", "str"), ("description", "str")]


def show_all(sql: str, variables: Variables) -> list[tuple[str, str, str]] | None:
    """`SHOW ALL` → every variable as (name, setting, description), or None for another SQL."""
    if re.match(r"^\s*show\s+all\s*;?\s*$", sql, re.I) is None:
        return None
    return [(k, v, "") for k, v in sorted(variables.values.items(), key=lambda kv: kv[0].lower())]


def show_statement(sql: str, variables: Variables) -> tuple[str, str] | None:
    m = _SHOW.match(sql)
    if m is None:
        return None
    name = m.group(1)
    if name.lower() in ("tables", "views", "materialized views", "indexes", "objects") or \
            re.match(r"(columns|create|indexes)\b", name, re.I):
        return None  # twofold's own SHOW
    key, value = variables.get(name)
    return key if key != "transaction_isolation" else "transaction_isolation", value


def reset_statement(sql: str, variables: Variables) -> bool:
    m = _RESET.match(sql)
    if m is None:
        return _DISCARD.match(sql) is not None
    if m.group(1).lower() == "all":
        variables.values.update({k: v for k, v in DEFAULTS.items()
                                 if k != "session_authorization"})
    else:
        variables.reset(m.group(1))
    return True


_PROBE = re.compile(r"^\s*select\s+(.+?)\s*;?\s*$", re.I | re.S)
_FN = re.compile(r"^(?:pg_catalog\.)?(version|current_schema|current_database|current_user|"
                 r"session_user|user|current_catalog|pg_backend_pid|"
                 r"current_setting)\s*(\(\s*(?:'([^']*)'(?:\s*,\s*\w+)?)?\s*\))?"
                 r"(?:\s+(?:as\s+)?(\"?\w+\"?))?$", re.I)


def probe(sql: str, variables: Variables, pid: int
          ) -> tuple[list[tuple[str, str]], list[Any]] | None:
    """`SELECT version(), current_user, pg_backend_pid(), ...` answered here: the columns
    (name, scalar: `pg_backend_pid()` is int4, as in PostgreSQL; the rest text) and the row."""
    m = _PROBE.match(sql)
    if m is None or " from " in f" {m.group(1).lower()} ":
        return None
    names: list[tuple[str, str]] = []
    row: list[Any] = []
    for part in _split_commas(m.group(1)):
        f = _FN.match(part.strip())
        if f is None:
            return None
        fn, parens, arg, alias = f.group(1).lower(), f.group(2), f.group(3), f.group(4)
        if fn in ("version", "current_schema", "current_database", "pg_backend_pid",
                  "current_setting") and not parens:
            return None
        value: Any
        if fn == "version":
            value = VERSION
        elif fn == "current_schema":
            value = "public"
        elif fn in ("current_database", "current_catalog"):
            value = DATABASE
        elif fn == "pg_backend_pid":
            value = pid
        elif fn == "current_setting":
            if arg is None:
                return None
            value = variables.get(arg)[1]
        else:
            value = variables.values["session_authorization"]
        names.append((alias.strip('"') if alias else fn,
                      "int4" if fn == "pg_backend_pid" else "str"))
        row.append(value)
    return names, row


def _split_commas(text: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out
