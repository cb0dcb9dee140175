"""A materialized view's error part: the companion shard holding its evaluation errors.

A materialized view's output is a collection of rows *and* an error collection (Materialize's
persist shard holds `Result<Row, DataflowError>`). Here the rows live in the view's shard and the
errors in a companion shard, `error_shard_id(shard)`, of schema `ERRORS_DESC` (one `error` text
column, with times and diffs like any update). The invariant every writer keeps and every reader
relies on:

- **Errors first.** A view's sink appends to the error part before the rows, each up to the same
  upper, so the error part's upper is never behind the rows' (`upper(errors) >= upper(rows)`).
  A reader reads both at one `as_of` and treats the *meet* of their uppers as the view's upper,
  so it never holds rows at a time whose errors it has not seen. (Two shards are not one atomic
  append; ordering them is what makes a crash between the two appends harmless: the error part
  is ahead, and the next writer corrects the rows from where they stopped.)
- **Absent is empty.** A view created before error parts existed has none (its old sink stopped
  writing at its first error, so every time it wrote was error-free). `ensure_error_shard`
  creates the part and, if it is still at the minimum while the rows are past it, appends an
  empty batch up to the rows' upper, by compare-and-append at the minimum: that append can only
  succeed while no sink has written errors, so it never hides one.

Neither part is compacted by the controller (view shards keep their history); on storage whose
readers drive `since` (PostgreSQL) each part's `since` is held by its own readers, and a reader
chooses an `as_of` at or after both.
"""

from __future__ import annotations

import contextlib

from twofold.protocol import ColumnType, Frontier, RelationDesc
from twofold.storage.errors import UnknownShard, UpperMismatch
from twofold.storage.shard import Shard
from twofold.storage.storage import Storage
from twofold.storage.table import TABLE_PREFIX

VIEW_SHARD_PREFIX = "mv/"
"""Shards of materialized views (`mv/<name>/<sink id>`): each has an error part."""

ERRORS_SUFFIX = "/errors"

ERRORS_DESC = RelationDesc(["error"], [ColumnType("str", nullable=False)])
"""The schema of an error part: the error message (as the engine's error frames carry it)."""


def error_shard_id(shard_id: str) -> str:
    """The id of the error part of the view shard `shard_id`."""
    return shard_id + ERRORS_SUFFIX


def ensure_error_shard(storage: Storage, shard_id: str) -> Shard:
    """The error part of `shard_id`, created (empty up to the rows' upper) if absent."""
    err = storage.create_shard(error_shard_id(shard_id), ERRORS_DESC)
    if err.upper == Frontier.minimum():
        rows_upper = storage.shard(shard_id).upper
        if rows_upper != Frontier.minimum():
            # A sink that wrote the part meanwhile made it correct as written.
            with contextlib.suppress(UpperMismatch):
                err.compare_and_append([], Frontier.minimum(), rows_upper)
    return err


def error_part(storage: Storage, shard_id: str) -> Shard | None:
    """The error part a reader of `shard_id` must read with it, if any.

    Tables have none. A view shard always has one (created here if absent, see the module
    docstring). Any other shard (written by a materialized-view sink under another name, as
    tests do) has one exactly when its sink made it.
    """
    if shard_id.startswith(TABLE_PREFIX) or shard_id.endswith(ERRORS_SUFFIX):
        return None
    try:
        return storage.shard(error_shard_id(shard_id))
    except UnknownShard:
        if shard_id.startswith(VIEW_SHARD_PREFIX):
            return ensure_error_shard(storage, shard_id)
        return None
