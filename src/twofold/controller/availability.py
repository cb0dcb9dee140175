"""Whether the instance's replicas can serve, and the errors that say so on time.

A read the controller sends while no replica is connected is replayed when one reconnects
(`spec/controller.md`), so a short outage costs a reader only latency. A long one must not
cost it the read's whole timeout: `Watchdog` notices when *every* replica has been disconnected
for `unavailable_after` seconds and calls back, and the controller then fails the reads waiting
(and every new one, until a replica is back) with `ReplicaUnavailable`, which names each
replica's last connection error. A subscribe is not failed: it resumes without gaps when a
replica returns.

`is_configuration_error` tells the failures no retry can fix (a refused token, another storage
or wire version, a TLS mismatch, an unknown host) from those that may pass (refused, reset,
timed out): waiting for a first connection stops at the first of the former.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable, Mapping

from twofold.controller.errors import ReplicaUnavailable
from twofold.controller.frontiers import ReplicaId
from twofold.controller.replica import ReplicaConnection
from twofold.transport import ConnectFailed, ConnectTimeout, HandshakeFailed, TlsFailed


def is_configuration_error(exc: BaseException | None) -> bool:
    """True for a connection failure that retrying cannot fix."""
    if isinstance(exc, HandshakeFailed):  # token, wire version, storage, not a twofold peer
        return True
    if isinstance(exc, TlsFailed):
        return True
    if isinstance(exc, ConnectFailed) and not isinstance(exc, ConnectTimeout):
        return isinstance(exc.__cause__, ssl.SSLError | socket.gaierror)
    return False


def describe(
    connections: Mapping[ReplicaId, ReplicaConnection], names: Mapping[ReplicaId, str]
) -> tuple[str, dict[ReplicaId, BaseException | None]]:
    """One line per disconnected replica: its name and its last error."""
    causes = {rid: c.last_error for rid, c in connections.items() if not c.connected}
    parts = []
    for rid, err in causes.items():
        name = names.get(rid, f"replica {rid}")
        if err is None:
            parts.append(f"{name}: no answer yet")
        else:  # transport errors already name the address
            parts.append(str(err) if name in str(err) else f"{name}: {err}")
    return "; ".join(parts), causes


def unavailable(
    what: str,
    connections: Mapping[ReplicaId, ReplicaConnection],
    names: Mapping[ReplicaId, str],
) -> ReplicaUnavailable:
    text, causes = describe(connections, names)
    configuration = bool(causes) and all(is_configuration_error(e) for e in causes.values())
    return ReplicaUnavailable(f"{what} ({text})" if text else what, causes,
                              names=dict(names), configuration=configuration)  # fmt: skip


class Watchdog:
    """Calls `fire()` once every replica has been disconnected for `after` seconds; `update`
    after each change of any replica's state. `down` is true from the call until a replica
    connects again. `after=None` never fires."""

    def __init__(self, after: float | None, fire: Callable[[], None]) -> None:
        self.after = after
        self._fire = fire
        self._timer: asyncio.TimerHandle | None = None
        self.down = False

    def update(self, connections: Mapping[ReplicaId, ReplicaConnection]) -> None:
        if self.after is None:
            return
        if not connections or any(c.connected for c in connections.values()):
            self.cancel()
            self.down = False
            return
        if self._timer is not None or self.down:
            return
        # Measured from the latest disconnection: the instance is down since then.
        since = max(c.down_since or 0.0 for c in connections.values())
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(since + self.after, self._expired)

    def _expired(self) -> None:
        self._timer = None
        self.down = True
        self._fire()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
