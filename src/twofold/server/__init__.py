"""`twofold.server`: the PostgreSQL wire protocol (v3) over a twofold database.

    async with twofold.open_async() as db:
        server = await Server(db).start("127.0.0.1", 6875)
        ...                                   # psql -h 127.0.0.1 -p 6875 -U twofold twofold
        await server.close()

Layers: `messages` (framing and message structs), `machine` (the sans-IO session phases),
`auth` (trust / password / md5 / SCRAM-SHA-256), `types` (OIDs, text and binary values),
`params` (inferred parameter types), `statements` (splitting, tags, COPY and cursors), `shims`
(SET/SHOW, transaction control, version() and friends), `catalog` (pg_catalog and
information_schema for tools), `session` (running statements), `server` (asyncio edge).
"""

from twofold.server.server import Server

__all__ = ["Server"]
