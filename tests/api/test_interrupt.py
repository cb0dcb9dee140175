"""Ctrl-C during a blocking call of the sync API (issue 12): a `KeyboardInterrupt` arrives
promptly — not when the read times out — and the database stays usable: the interrupted read's
peek is cancelled (nothing pending, no read hold left), later reads answer, `close()` is clean.

Run in a subprocess that receives a real SIGINT: the kernel may deliver it to any of the
process's threads, which is what made an untimed wait miss it."""

from __future__ import annotations

import signal
import sys
import time

from twofold.testing.helpers import child_process

CHILD = r"""
import time
import twofold

def interrupted(what, call):
    print(f"blocked {what}", flush=True)
    start = time.monotonic()
    try:
        call()
    except KeyboardInterrupt:
        print(f"interrupted {what} {time.monotonic() - start:.2f}", flush=True)
    else:
        print(f"returned {what}", flush=True)

with twofold.open(tick_interval=0.01, timeout=120) as db:
    t = db.create_table("t", {"x": int})
    t.insert([(1,)])
    far = db.now() + 600_000  # ten minutes ahead: the read waits for the table to get there
    interrupted("read", lambda: t.collect(as_of=far))
    idx = db.create_index("by_x", t, key="x")
    interrupted("lookup", lambda: db.lookup(idx, 1, as_of=far))
    with db.subscribe(t, as_of=far) as sub:  # nothing until the table reaches `far`
        interrupted("subscribe", lambda: sub.next())
    print("pending", len(db.controller.state.peeks), flush=True)
    print("again", sorted(t.collect().rows), idx.lookup(1).rows, flush=True)
print("closed", flush=True)
"""


def test_ctrl_c_interrupts_blocking_calls_promptly_and_the_database_stays_usable() -> None:
    lines: list[str] = []
    with child_process([sys.executable, "-c", CHILD]) as child:
        proc = child.proc
        for what in ("read", "lookup", "subscribe"):
            line = child.stdout.readline()
            assert line.strip() == f"blocked {what}", (line, lines)
            time.sleep(0.5)  # well inside the blocking call
            sent = time.monotonic()
            proc.send_signal(signal.SIGINT)
            line = child.stdout.readline()
            lines.append(line)
            assert line.startswith(f"interrupted {what} "), (line, lines)
            assert time.monotonic() - sent < 10  # promptly: the read's timeout is 120 s
        out = child.stdout.read()
        proc.wait(timeout=60)
    assert proc.returncode == 0, child.err
    assert "pending 0" in out  # the interrupted peeks were cancelled
    assert "again [(1,)] [(1,)]" in out
    assert out.rstrip().endswith("closed")
