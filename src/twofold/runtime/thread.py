"""A compute runtime's worker thread, exposed to asyncio as a `ComputeClient`.

`RuntimeClient` owns one thread running a `Worker` — the runtime's state machine — in a loop:
wait for the activator (or the worker's own deadline), drain commands, let the worker step, flush
its responses to the asyncio side in one wakeup. Commands and responses cross threads through the
mailboxes of `bridge.py`.

Iteration fence: a `Hello` starts a new protocol iteration, and nothing the runtime produced
before handling it may reach the new iteration's controller. The loop discards the worker's
unflushed responses when it handles a `Hello` and then emits an internal marker; `recv` drops
everything between a `send(Hello)` and its marker (responses already flushed for the old
iteration), so the stream after a `Hello` starts clean.

Answering on the caller's thread: a runtime may offer `inline`, a function that answers some
commands at once (the interactive runtime's ready point lookups, `ComputeWorker.answer_now`).
`send` tries it only when the runtime's thread has handled every command sent before and no
`Hello` fence is pending, so the answer is the one the thread would have given, and it goes into
the same response stream.

Shared fate: an unexpected exception in the worker ends the runtime — the outbox is closed with
that error, so the next `recv` raises it (and the multiplexer and replica above end with it). The
loop never swallows a worker error and carries on.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from twofold.protocol import ComputeCommand, ComputeResponse, Hello
from twofold.runtime import sched
from twofold.runtime.bridge import Activator, Inbox, Outbox
from twofold.runtime.sched import ThreadHints

log = logging.getLogger(__name__)


class _IterationStarted:
    """Internal marker: the worker has handled a `Hello` (never leaves `RuntimeClient`)."""


ITERATION_STARTED = _IterationStarted()


class FencedOutbox:
    """A runtime's responses on their way to asyncio, behind the iteration fence: `hello_sent`
    counts a `Hello` on its way to the runtime; everything taken before the matching
    `ITERATION_STARTED` marker (put by whoever runs the runtime) is dropped."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.outbox: Outbox[ComputeResponse | _IterationStarted] = Outbox(loop)
        self._fences = 0  # Hellos sent whose marker has not come back yet

    def hello_sent(self) -> None:
        self._fences += 1

    @property
    def fenced(self) -> bool:
        """A `Hello` was sent whose marker has not been taken yet."""
        return self._fences > 0

    def _admit(self, item: ComputeResponse | _IterationStarted) -> bool:
        """Whether `item` belongs to the current iteration (and is a response)."""
        if item is ITERATION_STARTED:
            self._fences = max(0, self._fences - 1)
            return False
        return self._fences == 0

    async def recv(self) -> ComputeResponse | None:
        while True:
            item = await self.outbox.get()
            if item is None:
                return None
            if self._admit(item):
                assert not isinstance(item, _IterationStarted)
                return item

    def recv_nowait(self) -> ComputeResponse | None:
        while True:
            item = self.outbox.get_nowait()
            if item is None:
                return None
            if self._admit(item):
                assert not isinstance(item, _IterationStarted)
                return item


class Worker(Protocol):
    """A runtime's state machine, driven by `RuntimeClient`'s thread."""

    def handle(self, command: ComputeCommand) -> None:
        """Apply one command."""

    def step(self) -> None:
        """Do whatever work is possible now."""

    def take_responses(self) -> list[ComputeResponse]:
        """Responses produced since the last call."""

    def wait_timeout(self) -> float | None:
        """How long the loop may sleep without an activation (`None`: until activated)."""

    def shutdown(self) -> None:
        """Release resources; called once on the worker thread when the loop ends."""


@runtime_checkable
class Maintains(Protocol):
    """A worker with deferred work (merges) to do after each step's responses are out."""

    def maintain(self) -> None: ...


class RuntimeClient:
    """A `ComputeClient` whose work happens on a dedicated thread. Use `async with`."""

    def __init__(self, worker: Worker, *, name: str, activator: Activator | None = None,
                 hints: ThreadHints | None = None,
                 inline: Callable[[ComputeCommand], ComputeResponse | None] | None = None,
                 ) -> None:
        self.name = name
        self.inline = inline
        self._sent = 0  # commands put in the inbox (the event loop's thread counts)
        self._handled = 0  # of those, handled by the worker (the worker's thread counts)
        self.hints = hints or ThreadHints()
        self.worker = worker
        self.activator = activator or Activator()
        self._inbox: Inbox[ComputeCommand] = Inbox(self.activator)
        self._responses: FencedOutbox | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self.error: BaseException | None = None

    async def start(self) -> RuntimeClient:
        if self._thread is not None:
            raise RuntimeError(f"runtime {self.name} already started")
        self._responses = FencedOutbox(asyncio.get_running_loop())
        self._thread = threading.Thread(target=self._run, name=f"twofold-{self.name}", daemon=True)
        self._thread.start()
        return self

    async def __aenter__(self) -> RuntimeClient:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def wake(self) -> None:
        """Ask the worker loop to run soon (thread-safe)."""
        self.activator.activate()

    async def send(self, command: ComputeCommand) -> None:
        if self._stopped.is_set() or self._stop.is_set():
            raise ConnectionError(f"runtime {self.name} has stopped") from self.error
        responses = self._responses
        if (self.inline is not None and responses is not None and not responses.fenced
                and self._handled == self._sent):
            response = self.inline(command)
            if response is not None:
                responses.outbox.put_from_loop(response)
                return
        if isinstance(command, Hello) and responses is not None:
            responses.hello_sent()
        self._sent += 1
        self._inbox.put(command)

    async def recv(self) -> ComputeResponse | None:
        if self._responses is None:
            raise RuntimeError(f"runtime {self.name} was not started")
        return await self._responses.recv()

    def recv_nowait(self) -> ComputeResponse | None:
        """A response that is already available, else `None` (the multiplexer's fast path)."""
        if self._responses is None:
            return None
        return self._responses.recv_nowait()

    async def close(self) -> None:
        """Stop the worker loop and wait for its thread."""
        self._stop.set()
        self.activator.activate()
        thread = self._thread
        if thread is not None and thread.is_alive():
            await asyncio.get_running_loop().run_in_executor(None, thread.join)

    def _run(self) -> None:
        assert self._responses is not None
        outbox = self._responses.outbox
        worker = self.worker
        if not self.hints.is_default:
            sched.apply(self.hints, self.name)
        maintain = worker.maintain if isinstance(worker, Maintains) else None
        try:
            while not self._stop.is_set():
                self.activator.wait(worker.wait_timeout())
                # Clear before draining: a command that arrives during the drain either is taken
                # by it or re-sets the activator for the next turn — never lost.
                self.activator.clear()
                for command in self._inbox.drain():
                    if isinstance(command, Hello):
                        worker.take_responses()  # the old iteration's, never to be sent
                        worker.handle(command)
                        outbox.put(ITERATION_STARTED)
                    else:
                        worker.handle(command)
                    self._handled += 1
                worker.step()
                responses = worker.take_responses()
                if responses:
                    outbox.put_many(responses)
                if maintain is not None:
                    maintain()  # after the responses: frontiers do not wait for merges
        except BaseException as e:  # shared fate: the error ends the runtime and is raised above
            log.exception("runtime %s failed", self.name)
            self.error = e
            # Deliver what the worker answered before the failure, then the failure itself.
            try:
                outbox.put_many(worker.take_responses())
            except Exception:
                log.exception("runtime %s: responses before the failure were lost", self.name)
            outbox.close(e)
        else:
            outbox.close()
        finally:
            try:
                worker.shutdown()
            except Exception:
                log.exception("runtime %s failed to shut down cleanly", self.name)
            self._stopped.set()

