"""Read plumbing shared by the API's read paths: error translation, subscriptions, and the
plain-peek fast path for map/filter/project reads of one index.

Contract: `translate(name)` turns every controller error a read can raise into the API's typed
error naming the relation read (the original stays as `__cause__`); no replica reachable is a
`ConnectionFailed` naming the addresses. `AsyncSubscription` yields
`Batch`es contiguous and exactly once, as the controller delivers them; one that ends before its
first batch is given to its `typed` check, which may name a since that passed its start time
(`ReadBeforeSince`) instead. `index_mfp` recognises a
relation the replica can answer straight from one index's arrangement, fusing only what keeps
the relation's semantics (never a map above a filter).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from twofold.api.errors import (
    DatabaseClosed,
    ObjectFailed,
    QueryFailed,
    QueryTimeout,
    ReadBeforeSince,
    SubscribeBacklogFull,
    SubscribeEnded,
    TwofoldError,
    UnknownObject,
)
from twofold.api.relation import Input, Relation
from twofold.api.remote import connection_error
from twofold.api.results import Batch
from twofold.api.schema import Schema
from twofold.controller import (
    CollectionFailed,
    ControllerClosed,
    CopyToFailed,
    PeekCancelled,
    PeekFailed,
    PeekTimeout,
    ReplicaUnavailable,
    SinceViolation,
    SubscribeBacklogExceeded,
    SubscribeFailed,
    Subscription,
    UnknownCollection,
)
from twofold.protocol import Call, Column, Get, GlobalId, MapFilterProject, Mfp
from twofold.protocol import Expr as PExpr


@contextlib.contextmanager
def translate(name: str) -> Iterator[None]:
    """Turn controller errors into the API's typed errors, naming the relation read."""
    try:
        yield
    except CollectionFailed as e:
        raise ObjectFailed(f"reading {name} failed: {e.message} (the replica raised it again "
                           f"after a restart; this is a bug in twofold, please report it)"
                           ) from e
    except SinceViolation as e:
        raise ReadBeforeSince(name, e.time if e.time is not None else -1,
                              e.since.time) from e
    except PeekTimeout as e:
        raise QueryTimeout(f"reading {name}: no answer within {e.timeout} s") from e
    except (PeekFailed, CopyToFailed) as e:
        raise QueryFailed(f"reading {name} failed: {e.message}", e.message) from e
    except PeekCancelled as e:
        raise QueryFailed(f"reading {name} was cancelled: {e}") from e
    except SubscribeBacklogExceeded as e:
        raise SubscribeBacklogFull(f"subscribe to {name} ended: {e.message}") from e
    except SubscribeFailed as e:
        raise SubscribeEnded(f"subscribe to {name} ended: {e.message}") from e
    except ControllerClosed as e:
        raise DatabaseClosed(f"the database is closed ({e})") from e
    except ReplicaUnavailable as e:
        raise connection_error(e, f"reading {name}") from e
    except UnknownCollection as e:
        raise UnknownObject(name, "collection", []) from e


def mfp_chain(rel: Relation) -> tuple[list[Mfp], Get, Input] | None:
    """`(chain, get, input)` when `rel`'s plan is one or more `Mfp`s (outermost first) over a
    `Get` of one of its inputs, else `None`."""
    plan = rel.plan
    chain: list[Mfp] = []
    while isinstance(plan, Mfp):
        chain.append(plan)
        plan = plan.input
    if not chain or not isinstance(plan, Get):
        return None
    inp = rel.inputs.get(plan.id)
    if inp is None:
        return None
    return chain, plan, inp


def index_mfp(rel: Relation) -> tuple[GlobalId, MapFilterProject] | None:
    """`(index id, mfp)` when `rel` is a map/filter/project of one index (an `Mfp` over its
    `Get`, possibly under further filter/project-only `Mfp`s), else `None`."""
    found = mfp_chain(rel)
    if found is None or found[2].kind != "index":
        return None
    outer, plan, inp = found
    arity = len(inp.schema)
    # Fuse from the innermost out. Only the innermost may map: fusing a later map would
    # evaluate it on rows an earlier filter drops (an error there would be spurious).
    first = outer.pop()
    maps, filters = list(first.map), list(first.filter)
    columns = list(first.project) if first.project is not None else list(range(
        arity + len(maps)))
    while outer:
        m = outer.pop()
        if m.map:
            return None
        filters.extend(_remap(f, columns) for f in m.filter)
        if m.project is not None:
            columns = [columns[j] for j in m.project]
    return plan.id, MapFilterProject(map=maps, filter=filters, project=columns)


def _remap(e: PExpr, columns: list[int]) -> PExpr:
    """`e` over a projection's output, rewritten over the projection's input."""
    if isinstance(e, Column):
        return Column(index=columns[e.index])
    if isinstance(e, Call):
        return Call(func=e.func, args=[_remap(a, columns) for a in e.args])
    return e


class AsyncSubscription:
    """Async iteration over a subscribed relation's `Batch`es, contiguous and exactly once.
    `aclose()` (or leaving `async with`) stops it."""

    def __init__(self, inner: Subscription, schema: Schema, name: str, as_of: int,
                 typed: Callable[[TwofoldError], TwofoldError] | None = None) -> None:
        self._inner = inner
        self.schema = schema
        self.as_of = as_of
        self._name = name
        self._typed = typed
        """Before the first batch: the error to raise for an ending (see the module docstring)."""

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> Batch:
        try:
            with translate(self._name):
                b = await self._inner.__anext__()
        except SubscribeEnded as e:
            better = e if self._typed is None else self._typed(e)
            if better is e:
                raise
            raise better from e.__cause__ or e
        self._typed = None
        updates = [(t, tuple(r), d) for t, r, d in (b.updates or [])]
        return Batch(self.schema, b.lower, b.upper, updates)

    def bound_backlog(self, updates: int) -> None:
        """Bound the updates waiting for this reader beyond the batch it is on: a reader that
        falls further behind ends with `SubscribeBacklogFull` at its next read (its queued
        batches dropped, so it costs bounded memory) instead of being buffered without end.
        Unbounded unless called."""
        self._inner.bound_backlog(updates)

    async def aclose(self) -> None:
        with contextlib.suppress(TwofoldError, ControllerClosed):
            await self._inner.aclose()

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
