"""Assembling a replica: storage access, the publication registry, the runtimes and, for two,
the multiplexer — in process (`Replica`) or served over TCP (`serve_replica`, `twofold replica`).
"""

from twofold.replica.assembly import (
    LocalConnection,
    Replica,
    RuntimesMode,
    StorageCache,
    serve_replica,
)

__all__ = ["LocalConnection", "Replica", "RuntimesMode", "StorageCache", "serve_replica"]
