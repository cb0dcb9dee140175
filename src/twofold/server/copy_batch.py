"""COPY FROM STDIN's text and csv data parsed in batches, by Arrow's CSV reader and compute
kernels, into an Arrow table of the table's columns — no Python per row.

Contract: `parse_batch(data, copy, scalars)` gives the data's rows as a `pa.Table` whose columns
are `c0..c{n-1}` in the engine types of `scalars` (int64, float64, large_string, large_binary,
bool), or `None` when the data holds something the batch path does not decide itself. `None`
sends the caller to the row-at-a-time parser (`statements.parse_copy_rows`), which gives the same
rows or the typed error naming the line and column (`22P02`); so every error, and every input
the batch path is unsure of, is answered exactly as before. What is `None`:

- a field count that differs from the columns', invalid UTF-8, an unterminated quote (the row
  parser names the line);
- a value that does not parse as its column's type, or parses only by Python's wider rules (`+5`,
  `1_000`, Unicode digits, out-of-range integers: the row parser decides);
- in csv, a value holding a `"` (PostgreSQL's CSV opens a quote anywhere in a field; Arrow's only
  at its start) or a multi-character delimiter; in text, a lone carriage return, a NUL, or a
  backslash before the delimiter (an escaped delimiter);
- a `\\.` line that is not the last.

What the batch path decides: in text, a field equal to the NULL string (before unescaping) is
NULL; backslash escapes `\\b \\f \\n \\r \\t \\v \\\\`, octal `\\nnn` and hex `\\xhh`, any other
`\\c` is `c` (PostgreSQL's text format); in csv, an unquoted field equal to the NULL string is
NULL and a quoted one never is, `""` inside quotes is a quote. Blank lines are skipped; HEADER
skips the first record. Numbers and booleans are read as PostgreSQL reads them (surrounding
whitespace allowed; `NaN`, `Infinity`, `inf` any case; `t/true/yes/on/1`, `f/false/no/off/0`);
bytea as `\\x` hex or the raw text's UTF-8 bytes (Python per value: bytea columns only).
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from twofold.engine.boolinput import FALSE_WORDS, TRUE_WORDS
from twofold.server.statements import CopyStatement, unescape
from twofold.server.types import decode_text

ARROW: dict[str, pa.DataType] = {"int": pa.int64(), "float": pa.float64(),
                                 "str": pa.large_string(), "bytes": pa.large_binary(),
                                 "bool": pa.bool_()}
_INT = r"^-?[0-9]+$"
_FLOAT = (r"^[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|"
          r"(?i:nan|inf|infinity))$")
_TRUE = pa.array(sorted(TRUE_WORDS))  # PostgreSQL's spellings (`engine.boolinput`)
_FALSE = pa.array(sorted(FALSE_WORDS))
_SIMPLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_FINAL = re.compile(rb"(?:^|(\n))\\\.\r?\n?$")
_ANY_END = re.compile(rb"(?:^|[\r\n])\\\.(?:[\r\n]|$)")


class _Unsure(Exception):
    """The batch path leaves this input to the row parser."""


def parse_batch(data: bytes, copy: CopyStatement, scalars: list[str]) -> pa.Table | None:
    try:
        return _parse(data, copy, scalars)
    except (_Unsure, pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError):
        return None


def _parse(data: bytes, copy: CopyStatement, scalars: list[str]) -> pa.Table:
    n = len(scalars)
    data = _strip_end_marker(data)
    if len(copy.delimiter) != 1 or copy.delimiter in "\r\n":
        raise _Unsure
    if copy.csv and data.count(b'"') % 2:
        raise _Unsure  # an unterminated quote (Arrow reads it to the end)
    if not copy.csv:
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
            if b"\r" in data:
                raise _Unsure
        delimiter = copy.delimiter.encode()
        if b"\x00" in data or (b"\\" + delimiter in data and any(
                len(m.group(1)) % 2 for m in re.finditer(rb"(\\+)" + re.escape(delimiter),
                                                         data))):
            raise _Unsure  # an escaped delimiter: an odd run of backslashes before one
    names = [f"c{i}" for i in range(n)]
    if not data.strip(b"\r\n"):
        return pa.table({c: pa.array([], ARROW[s]) for c, s in zip(names, scalars,
                                                                     strict=True)})
    read = pacsv.ReadOptions(column_names=names, skip_rows=int(copy.header),
                             use_threads=False, block_size=max(1 << 20, len(data) + 1))
    parse = pacsv.ParseOptions(delimiter=copy.delimiter,
                               quote_char='"' if copy.csv else False,
                               double_quote=copy.csv, escape_char=False,
                               newlines_in_values=copy.csv, ignore_empty_lines=True)
    if copy.csv:
        convert = pacsv.ConvertOptions(column_types={c: pa.large_string() for c in names},
                                       null_values=[copy.null], strings_can_be_null=True,
                                       quoted_strings_can_be_null=False)
    else:
        convert = pacsv.ConvertOptions(column_types={c: pa.large_string() for c in names},
                                       null_values=[], strings_can_be_null=False)
    raw = pacsv.read_csv(pa.BufferReader(data), read_options=read, parse_options=parse,
                         convert_options=convert)
    columns = []
    for name, scalar in zip(names, scalars, strict=True):
        col = raw.column(name).combine_chunks()
        if copy.csv:
            if pc.any(pc.match_substring(col, '"')).as_py():
                raise _Unsure
        else:
            col = _unescape(pc.if_else(pc.equal(col, copy.null), None, col))
        columns.append(_typed(col, scalar))
    return pa.table(columns, names=names)


def _strip_end_marker(data: bytes) -> bytes:
    """Without a final `\\.` line (PostgreSQL's end-of-data marker); one elsewhere is unsure."""
    if b"\\." not in data:
        return data
    m = _FINAL.search(data)
    if m is not None:
        data = data[:m.start() + (1 if m.group(1) else 0)]
    if _ANY_END.search(data):
        raise _Unsure
    return data


def _unescape(col: pa.Array) -> pa.Array:
    """PostgreSQL's text-format backslash escapes, applied to the values that have one."""
    has = pc.fill_null(pc.match_substring(col, "\\"), False)
    if not pc.any(has).as_py():
        return col
    # vectorised: `\\` to a NUL (the data holds none), the named escapes, `\c` to `c`
    out = pc.replace_substring(col, "\\\\", "\x00")
    if not pc.any(pc.match_substring_regex(out, r"\\[0-7x]")).as_py():
        for c, v in _SIMPLE.items():
            out = pc.replace_substring(out, "\\" + c, v)
        out = pc.replace_substring_regex(out, r"(?s)\\(.)", r"\1")
        return pc.replace_substring(out, "\x00", "\\")
    # octal and hex escapes name a byte: decode those values one by one (not UTF-8: 22P02)
    mask = has.to_numpy(zero_copy_only=False)
    values = col.filter(has).to_pylist()
    fixed = pa.array([unescape(v) for v in values], pa.large_string())
    return pc.replace_with_mask(col, pa.array(mask), fixed)


def _typed(col: pa.Array, scalar: str) -> pa.Array:
    if scalar == "str":
        return col.cast(pa.large_string())
    if scalar == "bytes":
        try:
            return pa.array([None if v is None else decode_text(v, "bytes")
                             for v in col.to_pylist()], pa.large_binary())
        except ValueError:
            raise _Unsure from None
    text = pc.utf8_trim_whitespace(col)
    if scalar == "bool":  # trimmed of PostgreSQL's (ASCII) spaces only, as `parse_bool`
        low = pc.utf8_lower(pc.utf8_trim(col, characters=" \t\n\r\v\f"))
        t, f = pc.is_in(low, _TRUE), pc.is_in(low, _FALSE)
        if not pc.all(pc.or_(pc.or_(t, f), pc.is_null(col)), min_count=0).as_py():
            raise _Unsure
        return pc.if_else(pc.is_null(col), None, t)
    pattern = _INT if scalar == "int" else _FLOAT
    if not pc.all(pc.match_substring_regex(text, pattern), min_count=0).as_py():
        raise _Unsure
    return pc.cast(text, ARROW[scalar])


def columns_in_order(table: pa.Table, names: list[str], order: list[str],
                     scalars_of: dict[str, str]) -> pa.Table:
    """`table`'s columns (named `c0..` for `names`) in the table's column `order`, the columns
    left out all NULL."""
    at = {n: i for i, n in enumerate(names)}
    cols: list[Any] = []
    for n in order:
        if n in at:
            cols.append(table.column(at[n]))
        else:
            cols.append(pa.nulls(table.num_rows, ARROW[scalars_of[n]]))
    return pa.table(cols, names=order)
