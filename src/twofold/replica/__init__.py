"""Assembling a replica: storage access, the publication registry, the runtimes and, for two,
the multiplexer — in process (`Replica`) or served over TCP (`serve_replica`, `twofold replica`);
with two runtimes over shareable storage, maintenance runs in a child process
(`spec/placement.md`).
"""

from twofold.replica.assembly import (
    PLACEMENTS,
    LocalConnection,
    Placement,
    Replica,
    RuntimesMode,
    ScratchStorage,
    StorageCache,
    needs_shared_storage,
    serve_replica,
)
from twofold.replica.process import MaintenanceFailed

__all__ = ["PLACEMENTS", "LocalConnection", "MaintenanceFailed", "Placement", "Replica",
           "RuntimesMode", "ScratchStorage", "StorageCache", "needs_shared_storage",
           "serve_replica"]
