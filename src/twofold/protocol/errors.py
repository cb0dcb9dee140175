"""Errors of the wire layer."""

from __future__ import annotations


class DecodeError(ValueError):
    """Input bytes are not a valid protocol message or frame."""


class FrameTooLarge(DecodeError):
    """A frame header announced a payload over the receiver's limit."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit
