"""How a replica's maintenance process starts (`process.MaintenanceProcess.start`).

`spawn` (the default) runs a fresh interpreter, which imports numpy,
polars and pyarrow again: ~50 MB of private memory before it holds a row (the modules' objects
and the libraries' own allocations). `fork` instead copies the front process, whose pages the
child then shares copy-on-write — what the child never writes stays one copy (the garbage
collector is frozen around the fork so that it does not touch every inherited object). Forking
is safe only in a process whose state we control and before the libraries have started their
thread pools (a child forked after polars' pool started deadlocks on its first parallel
operation), so `fork` is used by `twofold replica` (`serve_replica`) and falls back to `spawn`
whenever `fork_is_safe()` sees such a thread; the embedded `twofold.open()` always spawns.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import traceback
from typing import Literal, Protocol

StartMethod = Literal["spawn", "fork"]

SESSION_ENV = "TWOFOLD_MAINTENANCE_SESSION"


def own_session() -> bool:
    """Whether the maintenance process starts a session of its own (`setsid`): on by default,
    `TWOFOLD_MAINTENANCE_SESSION=0` keeps it in the front's, for measuring. Where the kernel
    groups processes by session for CPU shares (`CONFIG_SCHED_AUTOGROUP`, on this machine and
    on most desktop kernels), a session is a scheduling group of its own: under contention
    maintenance then gets a group's share of the cores instead of a share of the front's
    group, where a front saturated by its readers (the embedded placement: the user's loop
    answering lookups without pause) took most of it. The child still dies with the front
    (`PR_SET_PDEATHSIG`, the socket's end) and no longer receives the terminal's signals,
    which the front handles by closing the link (`docs/architecture.md`: the measurements)."""
    return os.environ.get(SESSION_ENV, "1") != "0"


_POOL_THREADS = re.compile(r"polars-\d|tokio-rt-worker|async-executor")
"""Names of library pool threads whose presence makes a fork unsafe (`fork_is_safe`): polars'
compute pool (`polars-0`, ...; not its `polars-ooc-cleanup` thread, started at import) and its
async runtimes. The allocator's background threads are fork-safe (jemalloc re-creates them)."""


class ChildProcess(Protocol):
    """What the front needs of its child (`subprocess.Popen` is one)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...

    def kill(self) -> None: ...


class ForkedChild:
    """A child made by `os.fork`, with `Popen`'s interface (the front reaps it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def _reaped(self, status: int) -> int:
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self._reaped(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self._reaped(status)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def fork_is_safe() -> bool:
    """Whether this process may fork a maintenance process: on Linux, with none of the
    libraries' pool threads started yet (a forked child would wait for them forever)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if _POOL_THREADS.match(name):
            return False
    return True


def spawn(child: socket.socket, storage_url: str | None, *, poll_interval: float,
          nice: int) -> ChildProcess:
    """Run `python -m twofold.replica.maintenance` on the socket `child`."""
    args = [sys.executable, "-m", "twofold.replica.maintenance", "--fd", str(child.fileno()),
            "--parent", str(os.getpid()), "--poll-interval", repr(poll_interval),
            "--nice", str(nice),
            "--log-level", logging.getLevelName(logging.getLogger().getEffectiveLevel())]
    if storage_url is not None:
        args += ["--storage", storage_url]
    return subprocess.Popen(args, pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
                            start_new_session=own_session())


def fork(front: socket.socket, child: socket.socket, storage_url: str | None, *,
         poll_interval: float, nice: int) -> ChildProcess:
    """Fork the maintenance process, serving on `child` (the front keeps `front`). Call only
    when `fork_is_safe()`."""
    from twofold.replica import maintenance

    parent = os.getpid()
    session = own_session()
    gc.collect()
    gc.freeze()  # inherited objects stay out of the child's collections: pages stay shared
    try:
        pid = os.fork()
    except BaseException:
        gc.unfreeze()
        raise
    if pid == 0:  # the child: never returns into the front's code
        code = 1
        try:
            front.close()
            if session:
                os.setsid()
            maintenance.reset_inherited_signals()
            maintenance.prepare(parent, nice)
            code = maintenance.serve(child, storage_url, poll_interval=poll_interval)
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(BaseException):
                sys.stderr.flush()
            os._exit(code)
    gc.unfreeze()
    return ForkedChild(pid)
