"""Errors of the wire layer."""

from __future__ import annotations

import re
from collections.abc import Sequence

from twofold.protocol.ids import GlobalId


class DecodeError(ValueError):
    """Input bytes are not a valid protocol message or frame."""


class FrameTooLarge(DecodeError):
    """A frame header announced a payload over the receiver's limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class DataflowFailure(RuntimeError):
    """A dataflow's step raised an unexpected error (an engine bug, not a data error): the
    runtime ends with it (shared fate) and the replica fails. Its text form
    `dataflow failed [u3,u4] (name): message` names the dataflow's exports so that whoever sees
    only the text (across a process boundary) can tell which dataflow it was: `find`."""

    _TEXT = re.compile(r"dataflow failed \[([^\]]*)\] \((.*?)\): (.*)", re.DOTALL)

    def __init__(self, exports: Sequence[GlobalId], name: str, message: str) -> None:
        self.exports = tuple(exports)
        self.name = name
        self.message = message
        ids = ",".join(str(i) for i in self.exports)
        super().__init__(f"dataflow failed [{ids}] ({name}): {message}")

    @classmethod
    def find(cls, error: BaseException | None) -> DataflowFailure | None:
        """The dataflow failure `error` is, wraps (as a cause or context), or quotes."""
        seen: set[int] = set()
        while error is not None and id(error) not in seen:
            seen.add(id(error))
            if isinstance(error, DataflowFailure):
                return error
            m = cls._TEXT.search(str(error))
            if m is not None:
                try:
                    exports = [GlobalId.parse(s) for s in m.group(1).split(",") if s]
                except ValueError:
                    exports = []
                if exports:
                    return cls(exports, m.group(2), m.group(3).strip())
            error = error.__cause__ or error.__context__
        return None
