"""Statement text helpers: splitting a simple-query string, command tags, COPY and cursor
statements.

Contract: `split_statements(text)` splits at top-level semicolons (not inside quotes, dollar
quotes or comments) and drops empty statements. `command_tag(sql, result)` is PostgreSQL's
CommandComplete tag. `parse_copy` / `parse_declare` / `parse_fetch` recognise the COPY, DECLARE
and FETCH forms the server runs itself (None for other statements; `FeatureNotSupported` for a
form it does not run). `parse_copy_rows` decodes COPY text or CSV data into Python rows.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from twofold.server.types import InvalidParameterValue, decode_text
from twofold.sql.errors import FeatureNotSupported, SqlError, SqlSyntaxError


def split_statements(text: str) -> list[str]:
    out: list[str] = []
    i, start, n = 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch in ("'", '"'):
            # E'...': a backslash escapes the next character (`E'it\'s'`)
            escapes = ch == "'" and i > 0 and text[i - 1] in "Ee" and (
                i < 2 or not (text[i - 2].isalnum() or text[i - 2] in "_$"))
            j = i + 1
            while j < n:
                if escapes and text[j] == "\\":
                    j += 2
                    continue
                if text[j] == ch:
                    if j + 1 < n and text[j + 1] == ch:
                        j += 2
                        continue
                    break
                j += 1
            i = j + 1
        elif ch == "-" and text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif ch == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif ch == "$":
            m = re.match(r"\$([A-Za-z_]\w*)?\$", text[i:])
            if m is None:
                i += 1
                continue
            tag = m.group(0)
            j = text.find(tag, i + len(tag))
            i = n if j < 0 else j + len(tag)
        elif ch == ";":
            out.append(text[start:i])
            start = i = i + 1
        else:
            i += 1
    out.append(text[start:])
    return [s.strip() for s in out if _meaningful(s)]


def _meaningful(s: str) -> bool:
    s = re.sub(r"--[^\n]*", "", s)
    s = re.sub(r"/\*.*?\*/", "", s, flags=re.S)
    return bool(s.strip())


def first_words(sql: str, n: int = 3) -> list[str]:
    s = re.sub(r"^(\s|--[^\n]*\n|/\*.*?\*/)+", "", sql, flags=re.S)
    return [w.upper() for w in re.findall(r"[A-Za-z_]+", s)[:n]]


def command_tag(sql: str, result: Any) -> str:
    words = first_words(sql, 4)
    head = words[0] if words else ""
    if head in ("INSERT",):
        return f"INSERT 0 {int(result)}"
    if head in ("UPDATE", "DELETE"):
        return f"{head} {int(result)}"
    if head in ("CREATE", "DROP"):
        rest = [w for w in words[1:] if w not in ("OR", "REPLACE", "DEFAULT", "IF", "UNIQUE")]
        kind = rest[0] if rest else ""
        if kind == "MATERIALIZED":
            kind = "MATERIALIZED VIEW"
        return f"{head} {kind}".strip()
    if head in ("DISCARD", "DEALLOCATE") and words[1:2] == ["ALL"]:
        return f"{head} ALL"  # PostgreSQL's tags: DISCARD ALL, DEALLOCATE ALL
    if head in ("SET", "RESET", "DISCARD", "DEALLOCATE", "BEGIN", "COMMIT", "ROLLBACK"):
        return head
    if head == "SHOW":
        return "SHOW"
    if isinstance(result, int) and not isinstance(result, bool):
        return head or "OK"
    return head or "OK"


class CopyStatement(msgspec.Struct, frozen=True):
    table: str | None
    columns: tuple[str, ...]
    query: str | None
    direction: str  # 'in' | 'out'
    csv: bool
    header: bool
    delimiter: str
    null: str
    binary: bool = False  # FORMAT binary (PostgreSQL's binary COPY file format)


class UndefinedSchema(SqlError):
    sqlstate = "3F000"


_IDENT = r'(?:"(?:[^"]|"")+"|[\w$]+)'
_NAME = rf"({_IDENT}(?:\s*\.\s*{_IDENT})?)"  # a table, optionally schema-qualified
_COPY_IN = re.compile(rf"^\s*copy\s+{_NAME}\s*(\(([^)]*)\))?\s+from\s+stdin\b(.*)$",
                      re.I | re.S)
_COPY_OUT = re.compile(r"^\s*copy\s+\((.*)\)\s+to\s+stdout\b(.*)$", re.I | re.S)
_COPY_OUT_T = re.compile(rf"^\s*copy\s+{_NAME}\s*(\(([^)]*)\))?\s+to\s+stdout\b(.*)$",
                         re.I | re.S)
_PART = re.compile(_IDENT)


def _table_name(text: str) -> str:
    """A COPY's table: `t`, `"t"`, or qualified by the one schema, `public.t` (asyncpg's
    `copy_records_to_table(schema_name=...)` sends `"public"."t"`); another schema is
    `3F000`, as PostgreSQL says of a schema it does not have."""
    parts: list[str] = [p[1:-1].replace('""', '"') if p.startswith('"') else p
                        for p in _PART.findall(text)]
    if len(parts) == 2:
        if parts[0] != "public":
            raise UndefinedSchema(f'schema "{parts[0]}" does not exist')
        return parts[1]
    return parts[0]


def _options(text: str) -> tuple[bool, bool, str | None, str | None, bool]:
    t = text.strip().rstrip(";").strip()
    low = t.lower()
    use_csv = bool(re.search(r"\bformat\s+'?csv'?|\bcsv\b", low))
    binary = bool(re.search(r"\bformat\s+'?binary'?|\bbinary\b", low))
    if binary and use_csv:
        raise SqlSyntaxError("COPY takes one FORMAT: csv or binary, not both")
    header = bool(re.search(r"\bheader(\s+'?(true|on|1)'?)?\b", low)) and not re.search(
        r"\bheader\s+'?(false|off|0)'?", low)
    return use_csv, header, _quoted(t, "delimiter"), _quoted(t, "null"), binary


def _quoted(options: str, name: str) -> str | None:
    """The string of option `name` in COPY's options: `'...'` (`''` a quote) or an escape
    string `E'...'` (`E'\\t'`, as psql users write a tab)."""
    m = re.search(rf"\b{name}\s+(?:as\s+)?(?:([Ee])'((?:''|\\.|[^'\\])*)'|'((?:''|[^'])*)')",
                  options, re.I | re.S)
    if m is None:
        return None
    if m.group(1):
        from twofold.sql.escapestring import decode

        return decode(f"E'{m.group(2)}'")
    return m.group(3).replace("''", "'")


def parse_copy(sql: str) -> CopyStatement | None:
    if not re.match(r"^\s*copy\b", sql, re.I):
        return None
    m = _COPY_IN.match(sql)
    direction, table, cols, query, opts = "in", None, "", None, ""
    if m is not None:
        table, cols, opts = _table_name(m.group(1)), m.group(3) or "", m.group(4)
    elif (m := _COPY_OUT.match(sql)) is not None:
        direction, query, opts = "out", m.group(1), m.group(2)
    elif (m := _COPY_OUT_T.match(sql)) is not None:
        direction, table, cols, opts = "out", _table_name(m.group(1)), m.group(3) or "", \
            m.group(4)
    else:
        raise FeatureNotSupported("COPY supports 'COPY t [(cols)] FROM STDIN' and "
                                  "'COPY (query | SUBSCRIBE ...) TO STDOUT'")
    use_csv, header, delim, null, binary = _options(opts)
    if binary and (header or delim is not None or null is not None):
        raise SqlSyntaxError("COPY FORMAT binary takes no HEADER, DELIMITER or NULL option")
    columns = tuple(c.strip().strip('"') for c in cols.split(",") if c.strip())
    return CopyStatement(table, columns, query, direction, use_csv, header,
                         delim if delim is not None else ("," if use_csv else "\t"),
                         null if null is not None else ("" if use_csv else "\\N"), binary)


_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
_ESCAPE = re.compile(r"\\([0-7]{1,3}|x[0-9a-fA-F]{1,2}|.)", re.S)


def unescape(field: str) -> str:
    """PostgreSQL's text-format escapes: `\\n` and friends, octal `\\nnn` and hex `\\xhh` (a
    byte each), any other `\\c` is `c`."""
    if "\\" not in field:
        return field
    raw = bytearray()
    pos = 0
    for e in _ESCAPE.finditer(field):
        raw += field[pos:e.start()].encode("utf-8")
        c = e.group(1)
        if c[0] in "01234567":
            raw.append(int(c, 8) & 0xFF)
        elif c[0] == "x" and len(c) > 1:
            raw.append(int(c[1:], 16))
        else:
            raw += _ESCAPES.get(c, c).encode("utf-8")
        pos = e.end()
    raw += field[pos:].encode("utf-8")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidParameterValue(f"COPY: the escapes of {field!r} are not UTF-8") from None


_PG_NAMES = {"int": "bigint", "float": "double precision", "str": "text", "bool": "boolean",
             "bytes": "bytea"}


def _bad_field(fields: list[str | None], scalars: list[str]) -> str:
    for col, (f, s) in enumerate(zip(fields, scalars, strict=True), 1):
        try:
            None if f is None else decode_text(f, s)
        except ValueError:
            return f"column {col}: invalid input syntax for type {_PG_NAMES.get(s, s)}: {f!r}"
    return "a field that does not parse"


def parse_copy_rows(data: bytes, copy: CopyStatement,
                    scalars: list[str]) -> list[tuple[Any, ...]]:
    text = data.decode("utf-8")
    raw: list[list[str | None]] = []
    if copy.csv:
        # A field is NULL when it is the NULL string unquoted: `""` is an empty string.
        for rec in csv_records(text, copy.delimiter):
            raw.append([None if f == copy.null and not quoted else f for f, quoted in rec])
    else:
        for line in text.split("\n"):
            if line.endswith("\r"):
                line = line[:-1]
            if line == "\\." or line == "":
                continue
            raw.append([None if f == copy.null else unescape(f)
                        for f in line.split(copy.delimiter)])
    if copy.header and raw:
        raw = raw[1:]
    rows: list[tuple[Any, ...]] = []
    for lineno, fields in enumerate(raw, 1 + int(copy.header)):
        if len(fields) != len(scalars):
            raise InvalidParameterValue(f"COPY line {lineno}: expected {len(scalars)} columns, "
                                        f"got {len(fields)}")
        try:
            rows.append(tuple(None if f is None else decode_text(f, s)
                              for f, s in zip(fields, scalars, strict=True)))
        except ValueError:
            raise InvalidParameterValue(f"COPY line {lineno}, {_bad_field(fields, scalars)}"
                                        ) from None
    return rows


def csv_records(text: str, delimiter: str) -> list[list[tuple[str, bool]]]:
    """CSV records as (field, was it quoted) — PostgreSQL's CSV: `"` quotes, `""` inside quotes
    is a quote, quoted fields may span lines; blank lines and a `\\.` line are skipped."""
    records: list[list[tuple[str, bool]]] = []
    fields: list[tuple[str, bool]] = []
    cur: list[str] = []
    quoted = in_quotes = False
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if in_quotes:
            if ch == '"':
                if i + 1 < n and text[i + 1] == '"':
                    cur.append('"')
                    i += 1
                else:
                    in_quotes = False
            else:
                cur.append(ch)
        elif ch == '"':
            in_quotes = quoted = True
        elif text.startswith(delimiter, i):
            fields.append(("".join(cur), quoted))
            cur, quoted = [], False
            i += len(delimiter) - 1
        elif ch in "\r\n":
            if ch == "\r" and i + 1 < n and text[i + 1] == "\n":
                i += 1
            fields.append(("".join(cur), quoted))
            if fields not in ([("", False)], [("\\.", False)]):
                records.append(fields)
            fields, cur, quoted = [], [], False
        else:
            cur.append(ch)
        i += 1
    if in_quotes:
        raise InvalidParameterValue("COPY csv: unterminated quoted field at the end of the data")
    if cur or quoted or fields:
        fields.append(("".join(cur), quoted))
        if fields not in ([("", False)], [("\\.", False)]):
            records.append(fields)
    return records


def copy_text_row(values: list[bytes | None]) -> bytes:
    out = []
    for v in values:
        if v is None:
            out.append(b"\\N")
        else:
            out.append(v.replace(b"\\", b"\\\\").replace(b"\t", b"\\t")
                       .replace(b"\n", b"\\n").replace(b"\r", b"\\r"))
    return b"\t".join(out) + b"\n"


_DECLARE = re.compile(r"^\s*declare\s+(\"?\w+\"?)\s+(?:(?:binary|insensitive|no\s+scroll|scroll)"
                      r"\s+)*cursor\s+(?:(with|without)\s+hold\s+)?for\s+(.*?)\s*;?\s*$",
                      re.I | re.S)
_FETCH = re.compile(r"^\s*fetch\s+(?:(?:forward\s+)?(all|\d+)\s+|next\s+|forward\s+)?"
                    r"(?:from\s+|in\s+)?(\"?\w+\"?)"
                    r"(?:\s+with\s*\(\s*timeout\s*=?\s*'?([^')]*)'?\s*\))?\s*;?\s*$", re.I | re.S)
_CLOSE = re.compile(r"^\s*close\s+(all|\"?\w+\"?)\s*;?\s*$", re.I)


def parse_declare(sql: str) -> tuple[str, str, bool] | None:
    """`DECLARE name CURSOR [WITH HOLD] FOR query` → (name, query, WITH HOLD?)."""
    m = _DECLARE.match(sql)
    return None if m is None else (m.group(1).strip('"'), m.group(3),
                                   (m.group(2) or "").lower() == "with")


def parse_fetch(sql: str) -> tuple[str, int | None, float | None] | None:
    m = _FETCH.match(sql)
    if m is None:
        return None
    count = m.group(1)
    n = None if count is None or count.lower() == "all" else int(count)
    if count is None:
        n = 1  # FETCH c, FETCH NEXT FROM c, FETCH FORWARD FROM c
    return m.group(2).strip('"'), n, parse_interval(m.group(3)) if m.group(3) else None


def parse_close(sql: str) -> str | None:
    m = _CLOSE.match(sql)
    return None if m is None else m.group(1).strip('"')


def parse_interval(text: str) -> float:
    m = re.fullmatch(r"\s*([\d.]+)\s*(ms|s|sec|seconds?|m|min|minutes?)?\s*", text, re.I)
    if m is None:
        raise FeatureNotSupported(f"timeout {text!r} is not an interval like '1s' or '500ms'")
    value, unit = float(m.group(1)), (m.group(2) or "s").lower()
    if unit == "ms":
        return value / 1000
    if unit.startswith("m"):
        return value * 60
    return value
