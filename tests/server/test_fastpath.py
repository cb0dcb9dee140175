"""A kept lookup's request answered from its bytes (`server/fastpath.py`): byte for byte the
reply of the machine-and-session path, over random requests — parameter types, NULLs,
values that do not parse or are of another type, text and binary formats both ways, with and
without Describe, inside and outside transaction blocks, between catalog changes, dropped
indexes and writes — and the session left as that path leaves it."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.server.wire import Raw, msg, query, startup

from twofold.server import fastpath
from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples

_TABLE = "fp_kv"
_ROWS = [(k % 12, [None, 0.5, -0.0, float("nan"), float("inf"), 1e20, 2.5][k % 7],
          [None, "a", "", "ünï", "tab\there"][k % 5]) for k in range(40)]
_TEXTS = [f"SELECT k, v, s FROM {_TABLE} WHERE k = $1",
          f"SELECT s, v FROM {_TABLE} WHERE k = $1 AND s = $2",
          f"SELECT v * 2 AS w, k FROM {_TABLE} WHERE k = $1",
          f"SELECT k, s FROM {_TABLE} WHERE k = $1 ORDER BY s"]


class Switch:
    """The fast path on for one session (by its backend pid), off for every other; counts
    the requests it answered."""

    def __init__(self) -> None:
        self.pid = 0
        self.hits = 0
        self.real = fastpath.answer

    def answer(self, s: Any, data: bytes, at: int) -> tuple[bytes, int] | None:
        if s.pid != self.pid:
            return None
        got = self.real(s, data, at)
        self.hits += got is not None
        return got


@pytest.fixture(scope="module")
def kv(server: ServerHandle) -> str:
    db = server.db
    server.call(db.sql(f"CREATE TABLE {_TABLE} (k bigint, v double precision, s text)"))
    db.get(_TABLE).insert(_ROWS)  # off the loop
    server.call(db.sql(f"CREATE INDEX {_TABLE}_k ON {_TABLE} (k)"))
    return _TABLE


@pytest.fixture(scope="module")
def kv_declared(server: ServerHandle) -> str:
    """The same rows with declared integer/real/varchar columns: announced as int4/float4/
    varchar, and sent in their widths, on both paths."""
    db = server.db
    name = _TABLE + "_declared"
    server.call(db.sql(f"CREATE TABLE {name} (k integer, v real, s varchar(8))"))
    db.get(name).insert(_ROWS)  # off the loop
    server.call(db.sql(f"CREATE INDEX {name}_k ON {name} (k)"))
    return name


@pytest.fixture
def switch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Switch]:
    sw = Switch()
    monkeypatch.setattr(fastpath, "answer", sw.answer)
    yield sw


def _login(server: ServerHandle) -> tuple[Raw, int]:
    raw = Raw(server.host, server.port)
    raw.send(startup())
    got = raw.until(b"Z")
    (key,) = [body for kind, body in got if kind == b"K"]
    return raw, struct.unpack_from("!i", key)[0]


def _bind(stmt: str, params: list[bytes | None], param_formats: tuple[int, ...],
          result_formats: tuple[int, ...], describe: bool) -> bytes:
    body = [b"\0" + stmt.encode() + b"\0", struct.pack(f"!h{len(param_formats)}h",
                                                       len(param_formats), *param_formats),
            struct.pack("!h", len(params))]
    for p in params:
        body.append(struct.pack("!i", -1) if p is None else struct.pack("!i", len(p)) + p)
    body.append(struct.pack(f"!h{len(result_formats)}h", len(result_formats), *result_formats))
    return (msg(b"B", b"".join(body)) + (msg(b"D", b"P\0") if describe else b"")
            + msg(b"E", b"\0" + struct.pack("!i", 0)) + msg(b"S"))


_OIDS = {0: "int8", 20: "int8", 21: "int2", 23: "int4", 701: "float8", 25: "text"}


def _value(oid: int, binary: bool, v: int | None, garbage: bool) -> bytes | None:
    if v is None:
        return None
    if garbage:
        return b"\x01\x02\x03" if binary else b"twelve"
    if not binary or oid == 25:
        return str(v).encode()
    kind = _OIDS.get(oid, "int8")
    if kind == "float8":
        return struct.pack("!d", float(v))
    fmt = {"int2": "!h", "int4": "!i"}.get(kind, "!q")
    try:
        return struct.pack(fmt, v)
    except struct.error:
        return struct.pack("!q", v)  # the wrong width for its type: 22P02 or not, alike


_KEYS = st.one_of(st.integers(-2, 14), st.integers(0, 11), st.none(),
                  st.sampled_from([2**31, 2**63 - 1]))
_LOOKUP = st.fixed_dictionaries({
    "stmt": st.integers(0, len(_TEXTS) - 1),
    "key": _KEYS,
    "second": st.sampled_from([b"a", b"", "ünï".encode(), b"zz", None]),
    "binary": st.booleans(),
    "garbage": st.integers(0, 9).map(lambda n: n == 0),
    "results": st.sampled_from(["none", "text", "binary", "mixed"]),
    "describe": st.booleans(),
})
_STEP = st.one_of(
    _LOOKUP.map(lambda d: ("lookup", d)),
    st.sampled_from([("query", "BEGIN"), ("query", "COMMIT"), ("query", "SELECT 1"),
                     ("orphan", None), ("ddl", "index2"), ("ddl", "drop2"),
                     ("ddl", "other"), ("ddl", "reindex"), ("insert", None)]),
)


@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(oids=st.lists(st.sampled_from(sorted(_OIDS)), min_size=len(_TEXTS),
                     max_size=len(_TEXTS)),
       steps=st.lists(_STEP, min_size=1, max_size=12), seed=st.integers(0, 10**6))
def test_replies_are_the_session_paths_byte_for_byte(server: ServerHandle, kv: str,
                                                     switch: Switch, oids: list[int],
                                                     steps: list[tuple[str, Any]],
                                                     seed: int) -> None:
    """The same requests on two connections — the fast path on for one (`fast`), off for the
    other (`slow`) — get the same replies, byte for byte."""
    _same_replies(server, kv, switch, oids, steps, seed)


@settings(max_examples=examples(15), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(oids=st.lists(st.sampled_from(sorted(_OIDS)), min_size=len(_TEXTS),
                     max_size=len(_TEXTS)),
       steps=st.lists(_STEP, min_size=1, max_size=12), seed=st.integers(0, 10**6))
def test_replies_over_declared_columns_are_the_session_paths(
        server: ServerHandle, kv_declared: str, switch: Switch, oids: list[int],
        steps: list[tuple[str, Any]], seed: int) -> None:
    """As above over integer/real/varchar columns, whose values go out as int4/float4/
    varchar: the fast path answers them too, with the session path's bytes."""
    _same_replies(server, kv_declared, switch, oids, steps, seed)


def _same_replies(server: ServerHandle, kv: str, switch: Switch, oids: list[int],
                  steps: list[tuple[str, Any]], seed: int) -> None:
    db = server.db
    texts = [t.replace(_TABLE, kv) for t in _TEXTS]
    slow, _ = _login(server)
    fast, switch.pid = _login(server)
    both = (slow, fast)

    def exchange(data: bytes, until: int = 1) -> None:
        replies = []
        for raw in both:
            raw.send(data)
            replies.append([m for _ in range(until) for m in raw.until(b"Z")])
        assert replies[0] == replies[1], data

    try:
        for i, (text, oid) in enumerate(zip(texts, oids, strict=False)):
            second = b"\0\0\0\x19" if "$2" in text else b""
            n = 2 if second else 1
            exchange(msg(b"P", f"q{i}\0{text}\0".encode() + struct.pack("!h", n)
                         + struct.pack("!I", oid) + second) + msg(b"S"))
        # A plain kept lookup, twice (planned, then kept): the fast path answers it.
        hits = switch.hits
        for _ in range(3):
            exchange(_bind("q0", [b"3"], (), (), True))
        if oids[0] in (0, 20, 21, 23):
            assert switch.hits > hits
        # A transaction block leaves its unnamed portal; the next request replaces it and
        # Sync ends it, so an Execute of it after that finds none.
        for data in (query("BEGIN"), _bind("q0", [b"4"], (), (), True), query("COMMIT"),
                     _bind("q0", [b"4"], (), (), True),
                     msg(b"E", b"\0" + struct.pack("!i", 0)) + msg(b"S")):
            exchange(data)
        for kind, arg in steps:
            if kind == "lookup":
                text = texts[arg["stmt"]]
                oid = oids[arg["stmt"]]
                binary = arg["binary"]
                params = [_value(oid, binary, arg["key"], arg["garbage"])]
                formats: tuple[int, ...] = (int(binary),)
                if "$2" in text:
                    params.append(arg["second"])
                    formats = (int(binary), 0)
                ncols = 3 if arg["stmt"] == 0 else 2
                results = {"none": (), "text": (0,), "binary": (1,),
                           "mixed": tuple((seed >> j) & 1 for j in range(ncols))}[arg["results"]]
                exchange(_bind(f"q{arg['stmt']}", params, formats, results, arg["describe"]))
            elif kind == "query":
                exchange(query(arg))
            elif kind == "orphan":  # the unnamed portal is gone after Sync, on both paths
                exchange(msg(b"E", b"\0" + struct.pack("!i", 0)) + msg(b"S"))
            elif kind == "insert":
                server.call(db.sql(f"INSERT INTO {kv} VALUES ({seed % 13}, 7.25, 'new')"))
            elif arg == "index2":
                server.call(db.sql(f"CREATE INDEX IF NOT EXISTS {kv}_ks ON {kv} (k, s)"))
            elif arg == "drop2":
                server.call(db.sql(f"DROP INDEX IF EXISTS {kv}_ks"))
            elif arg == "reindex":  # the lookups' own index, dropped and created again
                server.call(db.sql(f"DROP INDEX IF EXISTS {kv}_k"))
                exchange(_bind("q0", [b"3"], (), (), True))
                server.call(db.sql(f"CREATE INDEX {kv}_k ON {kv} (k)"))
            else:
                server.call(db.sql("CREATE TABLE IF NOT EXISTS fp_other (x bigint)"))
                server.call(db.sql("DROP TABLE fp_other"))
        exchange(query("ROLLBACK"))
    finally:
        for raw in both:
            raw.close()


def test_psycopg_prepared_lookups_are_answered_from_their_bytes(server: ServerHandle,
                                                                kv: str,
                                                                switch: Switch) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        switch.pid = c.info.backend_pid
        q = f"SELECT k, v, s FROM {kv} WHERE k = %s"
        for binary in (False, True):
            cur = c.cursor(binary=binary)
            for k in (1, 2, 40, 5, 5):
                got = cur.execute(q, [k], prepare=True).fetchall()
                want = server.call(server.db.sql(f"SELECT k, v, s FROM {kv} WHERE k = {k}"))
                assert sorted(map(repr, got)) == sorted(map(repr, want.rows))
        assert switch.hits >= 4  # the first executions prepare; the rest are answered
        hits = switch.hits
        with c.transaction():  # inside BEGIN: the transaction's path
            c.execute(q, [1], prepare=True).fetchall()
        assert switch.hits == hits
        c.execute(q, [1], prepare=True).fetchall()
        assert switch.hits == hits + 1


def test_a_malformed_request_is_the_machines_to_refuse(server: ServerHandle, kv: str,
                                                       switch: Switch) -> None:
    """A Bind whose parameter runs past its end is not answered: the machine closes the
    connection with 08P01, as without the fast path."""
    raw, switch.pid = _login(server)
    raw.send(msg(b"P", f"q\0{_TEXTS[0]}\0\0\0".encode()) + msg(b"S"))
    raw.until(b"Z")
    for _ in range(2):
        raw.send(_bind("q", [b"3"], (), (), True))
        raw.until(b"Z")
    hits = switch.hits
    good = _bind("q", [b"3"], (), (), True)
    raw.send(good)
    raw.until(b"Z")
    assert switch.hits == hits + 1
    bad = bytearray(good)
    struct.pack_into("!i", bad, 5 + 1 + 2 + 2 + 2, 200)  # the parameter's length
    raw.send(bytes(bad))
    got = raw.read_to_eof()
    assert got and got[0][0] == b"E" and b"08P01" in got[0][1]
    assert switch.hits == hits + 1
    raw.close()


def test_several_requests_in_one_packet_are_answered_in_order(server: ServerHandle, kv: str,
                                                              switch: Switch) -> None:
    raw, switch.pid = _login(server)
    raw.send(msg(b"P", f"q\0{_TEXTS[0]}\0\0\0".encode()) + msg(b"S"))
    raw.until(b"Z")
    raw.send(_bind("q", [b"3"], (), (), False))
    raw.until(b"Z")
    hits = switch.hits
    raw.send(b"".join(_bind("q", [str(k).encode()], (), (), False) for k in (0, 1, 2))
             + query("SELECT 41 + 1") + _bind("q", [b"5"], (), (), False))
    got = [raw.until(b"Z") for _ in range(5)]
    firsts = [next(body for kind, body in g if kind == b"D") for g in got]
    assert [f.split(b"\0\0\0", 2)[1][1:2] for f in firsts[:3]] == [b"0", b"1", b"2"]
    assert firsts[3].endswith(b"42")
    assert switch.hits > hits
    raw.close()


_SCALAR_VALUES = {
    "int": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(allow_nan=True, allow_infinity=True),
    "str": st.text(max_size=8),
    "bool": st.booleans(),
    "bytes": st.binary(max_size=8),
}


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data(), scalars=st.lists(st.sampled_from(sorted(_SCALAR_VALUES)), min_size=1,
                                       max_size=4),
       formats=st.sampled_from(["none", "text", "binary", "mixed"]))
def test_the_row_encoder_writes_what_encode_writes(data: st.DataObject, scalars: list[str],
                                                   formats: str) -> None:
    """`RowEncoder` (what every DataRow is now written with) against the reference: each
    value through `encode`, the row through `encode_data_row`; NULLs anywhere."""
    from twofold.server import messages as m
    from twofold.server.output import RowEncoder
    from twofold.server.portals import fmt
    from twofold.server.types import encode

    fmts = {"none": (), "text": (0,), "binary": (1,),
            "mixed": tuple(data.draw(st.integers(0, 1)) for _ in scalars)}[formats]
    rows = data.draw(st.lists(st.tuples(*[st.none() | _SCALAR_VALUES[s] for s in scalars]),
                              max_size=4))
    cols = [(f"c{i}", s) for i, s in enumerate(scalars)]
    want = b"".join(m.encode_data_row([encode(v, s, fmt(fmts, i) == 1)
                                       for i, (v, s) in enumerate(zip(row, scalars,
                                                                      strict=True))])
                    for row in rows)
    assert RowEncoder(cols, fmts).rows(rows) == want


@settings(max_examples=examples(200), deadline=None)
@given(v=st.integers(-(2**63), 2**63 - 1), x=st.floats(allow_nan=False), t=st.text(max_size=8))
def test_parameter_decoders_read_what_clients_write(v: int, x: float, t: str) -> None:
    """`decoder` (what every Bind parameter is parsed with) reads back PostgreSQL's binary
    and text forms; what does not parse raises for `decode` to make 22P02 of it."""
    from twofold.server.types import (
        BOOL,
        FLOAT4,
        FLOAT8,
        INT2,
        INT4,
        INT8,
        TEXT,
        InvalidParameterValue,
        decode,
        decoder,
    )

    for oid, fmt_, width in ((INT2, "!h", 16), (INT4, "!i", 32), (INT8, "!q", 64)):
        if -(2 ** (width - 1)) <= v < 2 ** (width - 1):
            assert decoder(oid, True)(struct.pack(fmt_, v)) == v
        assert decoder(oid, False)(f" {v} ".encode()) == v
    assert decoder(FLOAT8, True)(struct.pack("!d", x)) == x
    assert decoder(FLOAT4, True)(struct.pack("!f", 1.5)) == 1.5
    assert decoder(FLOAT8, False)(repr(x).encode()) == x
    assert decoder(TEXT, True)(t.encode()) == t == decoder(TEXT, False)(t.encode())
    assert decoder(BOOL, True)(b"\x01") is True and decoder(BOOL, False)(b"off") is False
    for oid, raw, binary in ((INT8, b"\x01\x02\x03", True), (INT8, b"x", False),
                             (FLOAT8, b"\x00", True), (BOOL, b"maybe", False),
                             (TEXT, b"\xff", False)):
        with pytest.raises(InvalidParameterValue):
            decode(raw, oid, binary, 1)


def test_a_client_that_does_not_read_its_replies_is_back_pressured(server: ServerHandle,
                                                                   switch: Switch) -> None:
    """Pipelined lookups whose replies are not read: the server stops answering (and
    reading) once its unsent replies pass the flush bound, so its memory stays bounded."""
    db = server.db
    server.call(db.sql("CREATE TABLE fp_big (k bigint, s text)"))
    db.get("fp_big").insert([(k, "x" * 20_000) for k in range(4)])
    server.call(db.sql("CREATE INDEX fp_big_k ON fp_big (k)"))
    raw, switch.pid = _login(server)
    raw.send(msg(b"P", b"q\0SELECT k, s FROM fp_big WHERE k = $1\0\0\0") + msg(b"S"))
    raw.until(b"Z")
    for _ in range(2):
        raw.send(_bind("q", [b"1"], (), (), True))
        raw.until(b"Z")
    hits = switch.hits
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    request = _bind("q", [b"1"], (), (), True)
    raw.sock.setblocking(False)
    sent = 0
    deadline = time.monotonic() + 5
    while sent < 3000 * len(request) and time.monotonic() < deadline:
        try:
            sent += raw.sock.send(request * 50)
        except BlockingIOError:
            time.sleep(0.01)
    time.sleep(0.5)
    buffered = server.server.write_buffered()
    assert switch.hits > hits  # the fast path answered some before the bound
    assert buffered < 4 << 20, buffered  # 3,000 replies of 20 kB would be 60 MB
    raw.close()


def test_an_unexpected_failure_declines_rather_than_breaking_the_connection(
        server: ServerHandle, kv: str, switch: Switch, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever goes wrong inside the fast path, the request goes the message path (which
    answers it, or reports its own error) and the connection goes on."""
    raw, switch.pid = _login(server)
    raw.send(msg(b"P", f"q\0{_TEXTS[0]}\0\0\0".encode()) + msg(b"S"))
    raw.until(b"Z")
    raw.send(_bind("q", [b"3"], (), (), True))
    want = raw.until(b"Z")

    class Broken:
        def execute_now(self, params: Any) -> Any:
            raise TypeError("broken")

    monkeypatch.setattr(fastpath, "statement", lambda db, sql: Broken())
    hits = switch.hits
    for _ in range(2):
        raw.send(_bind("q", [b"3"], (), (), True))
        assert raw.until(b"Z") == want
    assert switch.hits == hits
    raw.close()


def test_a_read_before_the_since_is_not_answered_at_once(
        server: ServerHandle, kv: str, switch: Switch, monkeypatch: pytest.MonkeyPatch) -> None:
    """Were a kept lookup's read time before the index's since, the published arrangement
    could not answer it: the fast path declines and both connections get the message path's
    reply."""
    db = server.db
    slow, _ = _login(server)
    fast, switch.pid = _login(server)
    replies: dict[str, list[Any]] = {}
    for name, raw in (("slow", slow), ("fast", fast)):
        raw.send(msg(b"P", f"q\0{_TEXTS[0]}\0\0\0".encode()) + msg(b"S"))
        raw.until(b"Z")
        for _ in range(2):
            raw.send(_bind("q", [b"3"], (), (), True))
            replies[name] = raw.until(b"Z")
    assert replies["slow"] == replies["fast"]
    idx = db.get(f"{kv}_k")
    since = server.call(_since(db, idx.id))
    assert since > 0
    real = db._choose_time
    monkeypatch.setattr(db, "_choose_time", lambda rel, as_of, **kw: since - 1
                        if rel is idx else real(rel, as_of, **kw))
    ctl = db._ctl
    real_now = ctl.peek_now_latest  # the kept lookup's own form of the same choice

    def before_since(target: Any, *, not_before: int, literal_constraints: Any,
                     mfp: Any = None, finishing: Any = None) -> Any:
        if target != idx.id:
            return real_now(target, not_before=not_before,
                            literal_constraints=literal_constraints, mfp=mfp,
                            finishing=finishing)
        assert ctl._local_reads is not None
        rows = ctl._read_local(ctl._local_reads, target, since - 1, literal_constraints, mfp,
                               finishing)
        return None if rows is None else (since - 1, rows)

    monkeypatch.setattr(ctl, "peek_now_latest", before_since)
    hits = switch.hits
    for name, raw in (("slow", slow), ("fast", fast)):
        raw.send(_bind("q", [b"3"], (), (), True))
        replies[name] = raw.until(b"Z")
    assert switch.hits == hits
    assert replies["slow"] == replies["fast"]
    for raw in (slow, fast):
        raw.close()


async def _since(db: Any, gid: Any) -> int:
    t = db._ctl.since(gid).time
    assert t is not None
    return int(t)
