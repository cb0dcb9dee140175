"""Sentences of the pgwire spec that had no test of their own: what the startup sends
(ParameterStatus values, BackendKeyData), `SSLRequest` without TLS and `GSSENCRequest`
answered `N` on a connection that then starts up, the session shims and SET/SHOW variables
the spec lists, the catalog relations it names, and that a statement waiting in one session
does not block another session's reads."""

from __future__ import annotations

import struct
import threading

import psycopg
from tests.server.wire import Raw, startup

from twofold.testing.pgwire import ServerHandle


def _request(code: int) -> bytes:
    return struct.pack("!ii", 8, code)


def _startup_replies(raw: Raw) -> list[tuple[bytes, bytes]]:
    raw.send(startup())
    return raw.until(b"Z")


def test_startup_reports_the_spec_parameters(server: ServerHandle) -> None:
    raw = Raw(server.host, server.port)
    got = _startup_replies(raw)
    status = {}
    for kind, body in got:
        if kind == b"S":
            key, value = body[:-1].split(b"\0", 1)  # name\0value\0
            status[key.decode()] = value.decode()
    assert status.items() >= {
        "server_version": "15.0", "server_encoding": "UTF8", "client_encoding": "UTF8",
        "DateStyle": "ISO, MDY", "integer_datetimes": "on",
        "standard_conforming_strings": "on", "TimeZone": "UTC", "application_name": ""}.items()
    kinds = [k for k, _ in got]
    assert kinds[0] == b"R" and b"K" in kinds and kinds[-1] == b"Z"
    key = next(body for kind, body in got if kind == b"K")
    assert len(key) == 8 and struct.unpack("!i", key[:4])[0] > 0  # pid, secret
    assert got[-1][1] == b"I"
    raw.close()


def test_ssl_and_gssenc_requests_get_n_then_startup(server: ServerHandle) -> None:
    for code in (80877103, 80877104):  # SSLRequest (no TLS configured), GSSENCRequest
        raw = Raw(server.host, server.port)
        raw.send(_request(code))
        assert raw.sock.recv(1) == b"N"
        assert _startup_replies(raw)[-1] == (b"Z", b"I")
        raw.close()
    raw = Raw(server.host, server.port)  # both, one after the other, as libpq may
    raw.send(_request(80877104))
    assert raw.sock.recv(1) == b"N"
    raw.send(_request(80877103))
    assert raw.sock.recv(1) == b"N"
    assert _startup_replies(raw)[-1] == (b"Z", b"I")
    raw.close()


def test_shims_and_variables_the_spec_lists(server: ServerHandle) -> None:
    with psycopg.connect(server.dsn(user="ann"), autocommit=True, connect_timeout=10) as c:
        assert c.execute("SELECT version(), session_user, current_user").fetchone() == (
            c.execute("SELECT pg_catalog.version()").fetchone()[0], "ann", "ann")  # type: ignore
        for name, value in [("standard_conforming_strings", "on"),
                            ("extra_float_digits", "2"), ("client_encoding", "UTF8"),
                            ("search_path", "public"), ("application_name", "audit"),
                            ("TimeZone", "UTC"), ("DateStyle", "ISO, MDY")]:
            c.execute(f"SET {name} = '{value}'")
            assert c.execute(f"SHOW {name}").fetchone() == (value,), name
        assert c.info.parameter_status("application_name") == "audit"
        c.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        assert c.execute("SHOW transaction isolation level").fetchone() == ("serializable",)


def test_catalog_relations_the_spec_names(server: ServerHandle, name: str) -> None:
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        c.execute(f"CREATE TABLE {name} (k bigint NOT NULL, v text)")
        assert c.execute("SELECT datname FROM pg_database").fetchall() == [("twofold",)]
        assert c.execute("SELECT setting FROM pg_settings WHERE name = 'server_version'"
                         ).fetchone() == ("15.0",)
        assert c.execute("SELECT count(*) FROM pg_attrdef").fetchone() == (0,)  # no defaults
        assert ("public",) in c.execute("SELECT nspname FROM pg_namespace").fetchall()
        cols = c.execute(
            "SELECT a.attname, t.typname, a.attnotnull FROM pg_attribute a "
            "JOIN pg_class r ON a.attrelid = r.oid JOIN pg_type t ON a.atttypid = t.oid "
            f"WHERE r.relname = '{name}' AND a.attnum > 0 ORDER BY a.attnum").fetchall()
        assert cols == [("k", "int8", True), ("v", "text", False)]
        assert c.execute("SELECT table_name FROM information_schema.tables "
                         f"WHERE table_name = '{name}'").fetchall() == [(name,)]


def test_a_waiting_statement_does_not_block_other_sessions(server: ServerHandle,
                                                           name: str) -> None:
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        c.execute(f"CREATE TABLE {name} (k bigint)")
        c.execute(f"INSERT INTO {name} VALUES (1)")
    waiter = psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10)
    waiter.execute(f"DECLARE w CURSOR FOR SUBSCRIBE {name} WITH (SNAPSHOT = false)")
    waiting = threading.Thread(
        target=lambda: waiter.execute("FETCH 1 w WITH (timeout = '20s')"), daemon=True)
    waiting.start()
    try:
        with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
            for _ in range(3):
                assert c.execute(f"SELECT count(*) FROM {name}").fetchone() == (1,)
            assert waiting.is_alive()  # the other session is still waiting in its FETCH
            c.execute(f"INSERT INTO {name} VALUES (2)")  # which ends its wait
        waiting.join(30)
        assert not waiting.is_alive()
    finally:
        waiter.close()


def test_binary_parameters_of_every_listed_type(server: ServerHandle, name: str) -> None:
    """Binary (and text) parameters of bool, int2/4/8, float4/8, text, bytea: the types psycopg
    sends for `Int2(...)`, `Float4(...)`, ..."""
    from psycopg.types.numeric import Float4, Float8, Int2, Int4, Int8

    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, v double precision, s text, b boolean, "
                  "y bytea)")
        for i, (k, v) in enumerate([(Int2(-3), Float4(0.5)), (Int4(70000), Float8(-2.25)),
                                    (Int8(2**40), Float4(float("inf")))]):
            marks = "%b, %b, %b, %b, %b" if i % 2 == 0 else "%t, %t, %t, %t, %t"
            c.execute(f"INSERT INTO {name} VALUES ({marks})", [k, v, f"s{i}", i == 1,
                                                               bytes([i, 255])])
        assert c.execute(f"SELECT * FROM {name} ORDER BY k").fetchall() == [
            (-3, 0.5, "s0", False, b"\x00\xff"), (70000, -2.25, "s1", True, b"\x01\xff"),
            (2**40, float("inf"), "s2", False, b"\x02\xff")]
        assert c.execute(f"SELECT k FROM {name} WHERE k = %b AND v = %b",
                         [Int2(-3), Float4(0.5)]).fetchall() == [(-3,)]
