"""Driving running replicas: how the API connects to them, and the errors that say why not.

Contract:
- `remote_factory` connects to one `twofold replica` over TCP (TLS given a context) with the
  shared token, naming this database's storage by its id (`twofold.storage.identity`), so a
  replica on another storage refuses the connection instead of serving other data.
- `connect_replicas` is `open()`'s check: it returns once every replica is connected, or raises
  within `timeout` seconds — at once when a replica refused (token, storage, wire version, TLS,
  unknown host) — a `ConnectionFailed` naming the address and the cause
  (`AuthenticationFailed` for a refused token, `StorageMismatch` for another storage).
- `connection_error` is the same translation for a read that failed because every replica has
  been unreachable for the database's `connect_timeout`.
"""

from __future__ import annotations

import ssl
from typing import Final

from twofold.api.errors import AuthenticationFailed, ConnectionFailed, StorageMismatch
from twofold.client import ComputeClient
from twofold.controller import ConnectFactory, Controller, ReplicaUnavailable
from twofold.transport import AuthenticationFailed as TransportAuthenticationFailed
from twofold.transport import StorageMismatch as TransportStorageMismatch
from twofold.transport import connect

DEFAULT_CONNECT_TIMEOUT: Final = 5.0
"""Seconds `open()` waits for every replica, and reads wait for one while all are down."""


def remote_factory(host: str, port: int, token: str | None, storage_id: str,
                   tls: ssl.SSLContext | None = None) -> ConnectFactory:  # fmt: skip
    async def factory() -> ComputeClient:
        return await connect(host, port, token=token, ssl=tls, storage_id=storage_id)

    return factory


def connection_error(e: ReplicaUnavailable, what: str) -> ConnectionFailed:
    """The API's typed error for `e`, naming the replicas at fault."""
    addresses = list(e.names.values())
    causes = list(e.causes.values())
    message = f"{what}: {e}"
    if causes and all(isinstance(c, TransportAuthenticationFailed) for c in causes):
        return AuthenticationFailed(f"{message}; check the token (token= / --token-file)",
                                    addresses)  # fmt: skip
    if causes and all(isinstance(c, TransportStorageMismatch) for c in causes):
        return StorageMismatch(message, addresses)
    return ConnectionFailed(message, addresses)


async def connect_replicas(controller: Controller, timeout: float) -> None:
    """Wait for every replica's first connection (see the module docstring)."""
    try:
        await controller.wait_connected(timeout)
    except ReplicaUnavailable as e:
        raise connection_error(e, "cannot open the database") from e
