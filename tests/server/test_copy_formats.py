"""COPY in CSV both ways and with a subset of the columns (psycopg 3): PostgreSQL's quoting (a
quoted empty string is not NULL), headers, what COPY TO writes COPY FROM reads back, and
columns left out of COPY FROM are NULL (a NOT NULL one is refused)."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import errors

from twofold.server.copy import CopyOut
from twofold.server.statements import csv_records, parse_copy, parse_copy_rows
from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples

ROWS = [(1, "plain", 1.5, True), (2, "a,b", None, False), (3, 'say "hi"', -0.25, None),
        (4, "two\nlines", 2.0, True), (5, "", 0.0, False), (6, None, None, None)]


def connect(server: ServerHandle) -> psycopg.Connection:
    return psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10)


def test_csv_copy_out_and_back_in(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, s text, v double precision, b boolean)")
        c.cursor().executemany(f"INSERT INTO {name} VALUES (%s, %s, %s, %s)", ROWS)
        with c.cursor().copy(f"COPY (SELECT * FROM {name} ORDER BY k) TO STDOUT "
                             "WITH (FORMAT csv, HEADER)") as cp:
            data = b"".join(bytes(b) for b in cp)
        text = data.decode()
        assert text.splitlines()[0] == "k,s,v,b"
        assert '2,"a,b",,f' in text and '3,"say ""hi""",-0.25,' in text
        assert '5,"",0,f' in text and "\n6,,,\n" in text  # empty string quoted, NULL bare
        c.execute(f"CREATE TABLE {name}_2 (k bigint, s text, v double precision, b boolean)")
        with c.cursor().copy(f"COPY {name}_2 FROM STDIN WITH (FORMAT csv, HEADER)") as cp:
            cp.write(data)
        assert c.execute(f"SELECT * FROM {name}_2 ORDER BY k").fetchall() == ROWS
        with c.cursor().copy(f"COPY {name} TO STDOUT (FORMAT csv, DELIMITER ';')") as cp:
            first = b"".join(bytes(b) for b in cp).decode().splitlines()[0]
        assert first.count(";") == 3


def test_copy_from_a_subset_of_the_columns(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint NOT NULL, s text, v double precision)")
        with c.cursor().copy(f"COPY {name} (v, k) FROM STDIN") as cp:
            cp.write_row((0.5, 1))
            cp.write_row((None, 2))
        assert c.execute(f"SELECT k, s, v FROM {name} ORDER BY k").fetchall() == [
            (1, None, 0.5), (2, None, None)]
        with pytest.raises(errors.NotNullViolation, match="'k'"):
            c.execute(f"COPY {name} (s) FROM STDIN")
        with pytest.raises(errors.DuplicateColumn):
            c.execute(f"COPY {name} (k, k) FROM STDIN")


_field = st.none() | st.text(alphabet=st.sampled_from(list('ab,;"\n\r x\\.')), max_size=6)


@settings(max_examples=examples(100), deadline=None)
@given(rows=st.lists(st.tuples(st.integers(-5, 5), _field, _field), max_size=8),
       delimiter=st.sampled_from([",", ";", "|"]), header=st.booleans())
def test_csv_round_trip(rows: list[tuple[object, ...]], delimiter: str, header: bool) -> None:
    """What COPY TO writes in CSV, COPY FROM parses back to the same rows (NULL vs '')."""
    opts = f"(FORMAT csv, DELIMITER '{delimiter}'{', HEADER' if header else ''})"
    out = parse_copy(f"COPY t TO STDOUT {opts}")
    into = parse_copy(f"COPY t FROM STDIN {opts}")
    assert out is not None and into is not None
    scalars = ["int", "str", "str"]
    writer = CopyOut(out, scalars, ["k", "s", "t"])
    messages = writer.rows(rows) + writer.finish()[:-5]
    data, at = b"", 0
    while at < len(messages):
        length = int.from_bytes(messages[at + 1:at + 5], "big")
        data += messages[at + 5:at + 1 + length]
        at += 1 + length
    assert parse_copy_rows(data, into, scalars) == rows
    assert len(csv_records(data.decode(), delimiter)) == len(rows) + int(header)
