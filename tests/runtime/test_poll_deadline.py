"""A worker with shards to poll waits until its next poll is *due*, not a full interval more.

`wait_timeout` used to return `poll_interval` whatever the last step cost, counted by both
loops (`RuntimeClient` and the maintenance process) from the end of the step and the merges
after it: an append by another process (which no notifier announces) waited up to step +
merges + `poll_interval` to be seen. The next poll is now due `poll_interval` after the last
step *started*.
"""

from __future__ import annotations

import time
import uuid

from tests.runtime.helpers import KV, unique_url

from twofold.protocol import (
    CreateDataflow,
    CreateInstance,
    DataflowDescription,
    Frontier,
    GlobalId,
    Hello,
    InitializationComplete,
    InstanceConfig,
    Schedule,
    SinkDesc,
    SourceImport,
    SubscribeSink,
)
from twofold.runtime.worker import ComputeWorker
from twofold.storage import open_storage

SUB = GlobalId.transient(1)
POLL = 1.0  # long, so a loaded machine's scheduling noise cannot reach the margins below


def test_wait_counts_from_the_last_poll() -> None:
    storage = open_storage(unique_url("poll-deadline"))
    t = storage.create_table("t", KV)
    t1 = t.write([[1, "a"]], 1)
    worker = ComputeWorker("solo", open_storage=lambda _url: storage, poll_interval=POLL)
    try:
        for command in (
            Hello(uuid.uuid4()),
            CreateInstance(InstanceConfig()),
            InitializationComplete(),
            CreateDataflow(
                DataflowDescription(
                    "sub",
                    source_imports={GlobalId.user(1): SourceImport(t.shard.shard_id, KV)},
                    sink_exports={SUB: SinkDesc(GlobalId.user(1), KV, SubscribeSink())},
                    as_of=Frontier.at(t1),
                )
            ),
            Schedule(SUB),
        ):
            worker.handle(command)
        worker.step()
        before = time.monotonic()
        first = worker.wait_timeout()
        assert first is not None and first <= POLL
        time.sleep(0.4)  # the work after a step (responses, merges) spends the wait
        left = worker.wait_timeout()
        assert left is not None
        assert left <= POLL - (time.monotonic() - before) + 0.01, left
        assert left <= POLL - 0.35
        time.sleep(max(0.0, left) + 0.05)
        assert worker.wait_timeout() == 0.0  # overdue: poll at once
        worker.step()
        again = worker.wait_timeout()
        assert again is not None and again > POLL - 0.35  # a new deadline from the new poll
    finally:
        worker.shutdown()
        storage.close()
