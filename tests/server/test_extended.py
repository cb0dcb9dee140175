"""The extended protocol message by message: row limits and PortalSuspended, skipping to Sync
after an error, Describe of statements and portals, unnamed statement replacement."""

from __future__ import annotations

import asyncio
import struct

from tests.server.wire import Raw, msg, query

from twofold.testing.pgwire import ServerHandle


def parse(name: str, sql: str, oids: tuple[int, ...] = ()) -> bytes:
    return msg(b"P", name.encode() + b"\0" + sql.encode() + b"\0" +
               struct.pack(f"!h{len(oids)}I", len(oids), *oids))


def bind(portal: str, stmt: str, params: tuple[bytes, ...] = ()) -> bytes:
    body = portal.encode() + b"\0" + stmt.encode() + b"\0" + struct.pack("!h", 0)
    body += struct.pack("!h", len(params))
    for p in params:
        body += struct.pack("!i", len(p)) + p
    return msg(b"B", body + struct.pack("!h", 0))


def execute(portal: str, limit: int = 0) -> bytes:
    return msg(b"E", portal.encode() + b"\0" + struct.pack("!i", limit))


SYNC = msg(b"S")


def kinds(raw: Raw) -> list[bytes]:
    return [k for k, _ in raw.until(b"Z")]


def test_row_limits_suspend_the_portal(server: ServerHandle, name: str) -> None:
    raw = Raw(server.host, server.port)
    raw.login()
    raw.send(query(f"CREATE TABLE {name} (k bigint); INSERT INTO {name} VALUES (1), (2), (3)"))
    raw.until(b"Z")
    raw.send(parse("s", f"SELECT k FROM {name} WHERE k > $1 ORDER BY k") +
             msg(b"D", b"Ss\0") + bind("p", "s", (b"0",)) + execute("p", 2) +
             execute("p", 2) + SYNC)
    got = raw.until(b"Z")
    assert [k for k, _ in got] == [b"1", b"t", b"T", b"2", b"D", b"D", b"s", b"D", b"C", b"Z"]
    param_oids = struct.unpack("!hI", got[1][1])
    assert param_oids == (1, 20)  # inferred from the column compared with
    assert got[-2][1] == b"SELECT 3\0"
    raw.close()


def test_error_skips_to_sync(server: ServerHandle) -> None:
    raw = Raw(server.host, server.port)
    raw.login()
    # A Bind of an unknown statement fails; the Execute after it is skipped until Sync.
    raw.send(parse("", "SELECT 1") + bind("", "nostmt") + execute("") + execute("") + SYNC)
    assert kinds(raw) == [b"1", b"E", b"Z"]
    # A statement's own errors (an unknown table) come at Execute, then Sync.
    raw.send(parse("", "SELECT * FROM missing") + bind("", "") + execute("") + SYNC)
    assert kinds(raw) == [b"1", b"2", b"E", b"Z"]
    raw.send(parse("", "SELECT 5") + bind("", "") + execute("") + SYNC)
    assert kinds(raw) == [b"1", b"2", b"D", b"C", b"Z"]
    raw.close()


def test_asyncpg_cursor_prefetch(server: ServerHandle, name: str) -> None:
    async def main() -> None:
        async with server.asyncpg() as conn:
            await conn.execute(f"CREATE TABLE {name} (k bigint)")
            await conn.execute(f"INSERT INTO {name} VALUES " +
                               ", ".join(f"({i})" for i in range(25)))
            async with conn.transaction():
                got = [r["k"] async for r in conn.cursor(
                    f"SELECT k FROM {name} ORDER BY k", prefetch=4)]
            assert got == list(range(25))

    asyncio.run(main())
