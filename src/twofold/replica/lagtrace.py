"""Where a write's frontier spends its time between the two processes (a benchmark probe).

Off unless `TWOFOLD_LAG_TRACE` names a directory. Then the maintenance process appends one
line per index frontier it reports (`m gid upper poll step_end sent`: wall-clock seconds when
the step that found the data began — its poll —, when the step ended, and when the write of
its frames to the socket returned, which can trail the front's read of them), and the front
one line when it reads that response from the socket (`a gid upper t`) and one when the
multiplexer takes it (`t gid upper t`). Both processes run on one host, so `time.time()`
compares across them. `bench/freshness.py` joins the lines to
its writes and prints the breakdown. The files are `<dir>/<role>-<pid>.tsv`.
"""

from __future__ import annotations

import os
import time
from typing import TextIO

from twofold.protocol import ComputeResponse, Frontiers

ENV = "TWOFOLD_LAG_TRACE"


class LagTrace:
    """Appends trace lines for one process (a no-op object when tracing is off)."""

    def __init__(self, role: str) -> None:
        directory = os.environ.get(ENV)
        self._file: TextIO | None = None
        if directory:
            path = os.path.join(directory, f"{role}-{os.getpid()}.tsv")
            self._file = open(path, "a", buffering=1)  # noqa: SIM115 — closed in `close`
        self.on = self._file is not None  # an attribute: checked per response on hot paths

    def frontier(self, tag: str, response: ComputeResponse | object, *times: float) -> None:
        """One line for `response` if it reports an index's write frontier."""
        f = self._file
        if f is None or not isinstance(response, Frontiers) or response.write_frontier is None:
            return
        upper = response.write_frontier.time
        stamps = "\t".join(f"{t:.6f}" for t in (times or (time.time(),)))
        f.write(f"{tag}\t{response.id}\t{upper}\t{stamps}\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self.on = False
