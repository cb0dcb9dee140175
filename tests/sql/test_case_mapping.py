"""`upper`, `lower` and `initcap` against PostgreSQL at every code point that has a case.

PostgreSQL (15, a UTF-8 database under the `C.UTF-8` locale, libc's provider) maps each
character by `towupper`/`towlower`: the simple, one-to-one mappings (`ß` stays, `İ` lowers to
`i`, `Σ` lowers to `σ` even at the end of a word). The test compares the three functions over
strings of consecutive code points from U+0001 to U+1FFFF (surrogates skipped) — every cased
character — with the session's PostgreSQL; skipped with the reason when none starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.sql.pgcompare import fresh_database

import twofold

_CHUNK = 2048


def _chunks() -> list[tuple[int, str]]:
    points = [n for n in range(1, 0x20000) if not 0xD800 <= n <= 0xDFFF]
    return [(i, "".join(map(chr, points[j:j + _CHUNK])))
            for i, j in enumerate(range(0, len(points), _CHUNK))]


@pytest.fixture(scope="module")
def pg(servers: Any) -> Iterator[Any]:
    options = "TEMPLATE template0 ENCODING 'UTF8' LC_CTYPE 'C.UTF-8' LC_COLLATE 'C.UTF-8'"
    with fresh_database(servers, "case", options) as con:
        yield con


def test_case_functions_equal_postgres_at_every_code_point(pg: Any) -> None:
    rows = _chunks()
    pg.execute("CREATE TABLE c (id int, s text)")
    with pg.cursor() as cur:
        cur.executemany("INSERT INTO c VALUES (%s, %s)", rows)
    query = "SELECT id, upper(s), lower(s), initcap(s) FROM c ORDER BY id"
    want = pg.execute(query).fetchall()
    with twofold.open() as db:
        db.sql("CREATE TABLE c (id int, s text)")
        db.table("c").insert(rows)
        got = db.sql(query).rows
    assert len(got) == len(want)
    for (i, *g), (_, *w) in zip(got, want, strict=True):
        for name, a, b in zip(("upper", "lower", "initcap"), g, w, strict=True):
            if a != b:
                at = next(k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
                pytest.fail(f"{name} of chunk {i} differs at U+{ord(rows[i][1][at]):04X}: "
                            f"twofold {a[at]!r}, PostgreSQL {b[at]!r}")


def test_case_mapping_examples() -> None:
    """The cases that differ from the full Unicode mappings (pinned; PostgreSQL's answers)."""
    with twofold.open() as db:
        rows = db.sql("SELECT upper('straße ŉ ᾳ'), lower('İSTANBUL ΟΔΟΣ'), "
                      "initcap('ǆemal ßa ᾳx'), upper('abc'), lower(NULL::text)").rows
    assert rows == [("STRAßE ŉ ᾼ", "istanbul οδοσ", "Ǆemal ßa ᾼx", "ABC", None)]
