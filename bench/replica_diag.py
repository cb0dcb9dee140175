"""Diagnostics for a replica process under benchmark (`bench/isolation.py --profile/--stages`).

- `Sampler`: every few ms, where each runtime thread stands, and how late the sampler itself
  woke (a late wakeup is time some thread held the GIL, or a core was not available).
- `Stages`: timestamps of each `Peek` at every hand-off inside the replica — decoded from the
  socket, sent to its runtime, handled by the worker, answered, received back by the event
  loop, written to the socket — and per-thread run-queue waits from `/proc`. It wraps internal
  methods of the transport and runtime (a diagnostic, never used outside benchmarks).

Both write a text report to a path when the replica process is told to stop.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import numpy as np


class Sampler:
    """A diagnostic stack sampler for the replica process (`--profile`): every `interval` it
    records the innermost twofold/library frame of each runtime thread, and how late it woke —
    a late wakeup is time some thread held the GIL without releasing it."""

    def __init__(self, path: str, interval: float = 0.005) -> None:
        import collections
        import threading

        self.path = path
        self.interval = interval
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.late: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import threading

        names = {}
        while not self._stop.is_set():
            t0 = time.perf_counter()
            time.sleep(self.interval)
            late = time.perf_counter() - t0 - self.interval
            self.late.append(late)
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                name = names.get(ident, "?")
                if not name.startswith("twofold-"):
                    continue
                stack = traceback.extract_stack(frame)
                where = [f"{Path(f.filename).name}:{f.name}" for f in stack[-4:]]
                self.counts[(name, " < ".join(reversed(where)))] += 1
                if late > float(os.environ.get("TWOFOLD_BENCH_LATE_MS", "20")) / 1000:
                    # Where a thread stands right after a long GIL hold (or a scheduling gap).
                    self.counts[(f"LATE {name}", " < ".join(reversed(where)))] += 1

    def dump(self) -> None:
        self._stop.set()
        late = np.array(self.late) * 1000
        with open(self.path, "w") as f:
            if len(late):
                f.write(f"sampler wakeup lateness ms: p50 {np.percentile(late, 50):.1f} p90 "
                        f"{np.percentile(late, 90):.1f} p99 {np.percentile(late, 99):.1f} max "
                        f"{late.max():.1f} (n={len(late)})\n")
            for (thread, where), n in self.counts.most_common(60):
                f.write(f"{n:6d} {thread:22s} {where}\n")


class Stages:
    """Per-peek hand-off timestamps inside the replica. See the module docstring."""

    PAIRS = (
        ("decoded", "sent"), ("sent", "handled"), ("handled", "answered"),
        ("answered", "received"), ("received", "written"), ("decoded", "written"),
    )

    def __init__(self, path: str) -> None:
        from twofold.protocol import Peek, PeekResponse
        from twofold.runtime import thread as rt_thread
        from twofold.runtime import worker as rt_worker
        from twofold.transport import server as tr_server

        self.path = path
        self.stamps: dict[uuid.UUID, dict[str, float]] = collections.defaultdict(dict)
        stamps = self.stamps
        now = time.perf_counter

        decode = tr_server.decode_command  # type: ignore[attr-defined]  # the name the server calls

        def decode_command(payload: Any, **kw: Any) -> Any:
            command = decode(payload, **kw)
            if isinstance(command, Peek):
                stamps[command.uuid]["decoded"] = now()
            return command

        deliver = tr_server.ReplicaServer._deliver

        async def _deliver(server: Any, response: Any) -> None:
            await deliver(server, response)
            if isinstance(response, PeekResponse):
                stamps[response.uuid]["written"] = now()

        send = rt_thread.RuntimeClient.send

        async def send_(client: Any, command: Any) -> None:
            if isinstance(command, Peek):
                stamps[command.uuid]["sent"] = now()
            await send(client, command)

        recv = rt_thread.RuntimeClient.recv
        recv_nowait = rt_thread.RuntimeClient.recv_nowait

        async def recv_(client: Any) -> Any:
            response = await recv(client)
            if isinstance(response, PeekResponse):
                stamps[response.uuid]["received"] = now()
            return response

        def recv_nowait_(client: Any) -> Any:
            response = recv_nowait(client)
            if isinstance(response, PeekResponse):
                stamps[response.uuid]["received"] = now()
            return response

        peek = rt_worker.ComputeWorker._peek
        done = rt_worker.ComputeWorker._peek_done

        def _peek(worker: Any, p: Any) -> None:
            stamps[p.uuid]["handled"] = now()
            peek(worker, p)

        def _peek_done(worker: Any, pp: Any, response: Any) -> None:
            stamps[pp.peek.uuid]["answered"] = now()
            done(worker, pp, response)

        patches: list[tuple[object, str, object]] = [
            (tr_server, "decode_command", decode_command),
            (tr_server.ReplicaServer, "_deliver", _deliver),
            (rt_thread.RuntimeClient, "send", send_),
            (rt_thread.RuntimeClient, "recv", recv_),
            (rt_thread.RuntimeClient, "recv_nowait", recv_nowait_),
            (rt_worker.ComputeWorker, "_peek", _peek),
            (rt_worker.ComputeWorker, "_peek_done", _peek_done),
        ]
        for owner, name, fn in patches:
            setattr(owner, name, fn)

    def dump(self) -> None:
        complete = [s for s in list(self.stamps.values()) if len(s) == 6]
        with open(self.path, "w") as f:
            for a, b in self.PAIRS:
                ms = np.array([(s[b] - s[a]) * 1000 for s in complete])
                if len(ms):
                    f.write(f"{a}->{b}: n={len(ms)} p50 {np.percentile(ms, 50):.2f} p90 "
                            f"{np.percentile(ms, 90):.2f} p99 {np.percentile(ms, 99):.2f} "
                            f"max {ms.max():.2f} ms\n")
            for t in threading.enumerate():
                try:
                    with open(f"/proc/self/task/{t.native_id}/schedstat") as stat:
                        run, wait, slices = (int(x) for x in stat.read().split())
                except (OSError, ValueError):
                    continue
                f.write(f"thread {t.name}: cpu {run / 1e6:.0f} ms, run-queue wait "
                        f"{wait / 1e6:.0f} ms over {slices} slices "
                        f"({wait / 1e3 / max(1, slices):.0f} us per slice)\n")
