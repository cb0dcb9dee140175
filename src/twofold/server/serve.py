"""`twofold serve`: one process owning the storage, catalog, controller and a pgwire server.

Contract: `serve(...)` opens the database (embedded storage and replica by default, or
`replicas=` remote ones), listens, calls `ready(host, port)` once accepting connections, and
runs until SIGTERM/SIGINT (or `stop` is set), then closes every session and the database.
`resolve_auth(method, passwords, host)` picks the authentication method: trust by default on a
loopback address, SCRAM-SHA-256 when a password file is given; trust on a non-loopback address
must be asked for explicitly.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import ssl
from collections.abc import Callable, Sequence

from twofold.server.server import Server

INTROSPECTION_INTERVAL = 1.0
"""Seconds between updates of the replicas' introspection indexes (the monitoring relations)."""

IDLE_TICK_INTERVAL = 0.25
"""The storage ticker's longest pause while nothing is written (`Ticker.idle_interval`): an
idle server's tables' uppers move four times a second rather than every 50 ms tick, so neither
this process nor the maintenance process spends a round on every 50 ms tick; a write is
followed by ticks at the usual interval, and reads wait for nothing more than before."""


def _loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_auth(method: str | None, passwords: dict[str, str] | None, host: str) -> str:
    if method is None:
        if passwords:
            return "scram-sha-256"
        if not _loopback(host):
            raise ValueError(f"refusing passwordless (trust) connections on {host}, which is "
                             "not a loopback address: give --password-file, or --auth trust "
                             "to allow it")
        return "trust"
    if method != "trust" and not passwords:
        raise ValueError(f"--auth {method} needs --password-file (lines of user:password)")
    return method


async def serve(host: str, port: int, *, storage: str | None = None,
                replicas: Sequence[str] | None = None, token: str | None = None,
                auth: str = "trust", passwords: dict[str, str] | None = None,
                tls: ssl.SSLContext | None = None,
                ready: Callable[[str, int], None] | None = None,
                stop: asyncio.Event | None = None) -> None:
    from twofold.api.session import AsyncDatabase
    from twofold.runtime import sched

    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    async with AsyncDatabase(storage, replicas=list(replicas) if replicas else None,
                             token=token, timeout=60.0,
                             introspection_interval=INTROSPECTION_INTERVAL) as db:
        if db.ticker is not None:
            db.ticker.idle_interval = IDLE_TICK_INTERVAL
        # This process is the server's own, and its event loop thread answers every request
        # (network, sessions, controller, point lookups): it asks for the read path's short
        # latency slice (`twofold.runtime.sched`; `TWOFOLD_LATENCY_SLICE_US=0` turns it off),
        # so an arriving request preempts whatever is mid-slice rather than waiting for the
        # slice to end. Asked after the database started, so that neither the maintenance
        # process nor the storage ticker inherits it.
        slice_us = sched.latency_slice_from_env()
        if slice_us is not None:
            sched.apply(sched.ThreadHints(slice_us=slice_us), "pgwire event loop")
        server = await Server(db, auth=auth, passwords=passwords, tls=tls).start(host, port)
        try:
            if ready is not None:
                ready(server.host, server.port)
            await stop.wait()
        finally:
            await server.close()
