"""Fill the expected results of a `.slt` file's queries from DuckDB (the oracle), in place:
`python -m tests.sql.fill_slt tests/sql/slt/joins.slt`. Records marked `onlyif twofold` keep
the results written by hand; everything else is what DuckDB answers."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
from tests.sql.slt import Record, fmt, parse_file


def fill(path: Path) -> None:
    text = path.read_text()
    con = duckdb.connect()
    out: list[str] = []
    lines = text.split("\n")
    records = {r.line: r for r in parse_file(text)}
    i = 0
    while i < len(lines):
        rec = records.get(i + 1)
        if rec is None:
            out.append(lines[i])
            i += 1
            continue
        # copy the header and SQL
        j = i
        while j < len(lines) and lines[j].strip() and lines[j].strip() != "----":
            out.append(lines[j])
            j += 1
        if j < len(lines) and lines[j].strip() == "----":
            j += 1
            while j < len(lines) and lines[j].strip():
                j += 1
        skip = "duckdb" in rec.skip or (rec.only and "duckdb" not in rec.only)
        if rec.kind == "statement":
            if not skip:
                try:
                    con.execute(rec.sql)
                except Exception:
                    if not rec.expect_error:
                        raise
        elif rec.kind == "query":
            out.append("----")
            if skip:
                out.extend(rec.expected)
            else:
                out.extend(_values(rec, con.execute(rec.sql).fetchall()))
        i = j
    path.write_text("\n".join(out))


def _values(rec: Record, rows: list[tuple[object, ...]]) -> list[str]:
    formatted = [[fmt(v, rec.types[k] if k < len(rec.types) else "T") for k, v in enumerate(r)]
                 for r in rows]
    if rec.sort == "rowsort":
        formatted.sort()
    return ["\t".join(r) for r in formatted]


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        fill(Path(arg))
