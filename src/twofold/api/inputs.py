"""`Inputs`: a relation's inputs — that they exist, how a dataflow imports them, and the
time a read or a new dataflow uses.

Contract: `_check_relation` refuses a relation of another database or over a dropped object
(`UnknownObject`). `_choose_time` is `as_of` if given (`ReadBeforeSince` before an input's
since), else the latest time every input is complete at, and with read-your-writes never before
this session's latest write.
"""

from __future__ import annotations

from twofold.api.core import SessionCore
from twofold.api.errors import InvalidArgument, ReadBeforeSince, UnknownObject
from twofold.api.objects import MaterializedView
from twofold.api.reads import translate
from twofold.api.relation import Input, Relation
from twofold.controller import UnknownCollection
from twofold.protocol import MAX_TIME, Frontier, GlobalId, IndexImport, SourceImport


class Inputs(SessionCore):
    """Inputs of relations and read times; see the module docstring."""

    def _check_relation(self, rel: object, what: str) -> Relation:
        if not isinstance(rel, Relation):
            raise InvalidArgument(f"{what}: expected a Relation, got {type(rel).__name__}")
        if rel._db is not self:
            raise InvalidArgument(f"{what}: the relation belongs to another database")
        for inp in rel.inputs.values():
            obj = self._catalog.get(inp.name)
            if obj is None or inp.id not in obj.inputs:
                raise UnknownObject(inp.name, f"{inp.kind} (was it dropped?)",
                                    sorted(self._catalog))
        for name, gid in rel.views.items():
            view = self._catalog.get(name)
            if view is None or getattr(view, "id", None) != gid:
                raise UnknownObject(name, "view (was it dropped?)", sorted(self._catalog))
        return rel

    def _imports(self, rel: Relation) -> tuple[dict[GlobalId, IndexImport],
                                               dict[GlobalId, SourceImport]]:
        indexes: dict[GlobalId, IndexImport] = {}
        sources: dict[GlobalId, SourceImport] = {}
        for gid, inp in rel.inputs.items():
            if inp.kind == "index":
                assert inp.index is not None
                indexes[gid] = IndexImport(desc=inp.index, relation=inp.schema.desc())
            else:
                assert inp.shard is not None
                sources[gid] = SourceImport(shard=inp.shard, desc=inp.schema.desc())
        return indexes, sources

    def _bounds(self, inp: Input) -> tuple[int, int | None]:
        """`(since, latest complete time or None)` of one input."""
        if inp.kind == "index":
            if inp.id in self._ctl.failed:  # its dataflow failed for good: ObjectFailed
                with translate(inp.label):
                    self._ctl.check_not_failed([inp.id])
            try:
                since, upper = self._ctl.since(inp.id), self._ctl.frontier(inp.id)
            except UnknownCollection:
                raise UnknownObject(inp.name, "index (was it dropped?)",
                                    sorted(self._catalog)) from None
        else:
            assert inp.shard is not None
            shard = self._storage.shard(inp.shard)
            since, upper = shard.since, shard.upper
            view = self._catalog.get(inp.name)
            if isinstance(view, MaterializedView):
                # Before its as_of a view's shard is empty, not the view's contents: reading
                # there would silently miss every write the view was created after.
                since = since.join(Frontier.at(view.as_of))
        if since.is_empty:
            raise ReadBeforeSince(inp.label, 0, None)
        s = since.time
        assert s is not None
        latest = upper.step_back()
        return s, latest

    def _choose_time(self, rel: Relation, as_of: int | None, *, ryw: bool = True) -> int:
        if as_of is not None and (isinstance(as_of, bool) or not isinstance(as_of, int)
                                  or not 0 <= as_of <= MAX_TIME):
            raise InvalidArgument("as_of must be an int timestamp in [0, 2**64 - 1], got "
                                  f"{as_of!r}")
        floor = 0
        latest: int | None = None
        for inp in rel.inputs.values():
            since, complete = self._bounds(inp)
            if as_of is not None and as_of < since:
                raise ReadBeforeSince(inp.label, as_of, since)
            floor = max(floor, since)
            if complete is not None:
                latest = complete if latest is None else min(latest, complete)
        if as_of is not None:
            return as_of
        t = max(floor, latest if latest is not None else floor)
        if not rel.inputs:
            t = self._storage.oracle.read_ts()
        if ryw and self.consistency == "read-your-writes":
            with self._write_lock:
                t = max(t, self._last_write)
        return t

    def now(self) -> int:
        """The latest timestamp handed out to a write or a tick."""
        return self._storage.oracle.read_ts()

    def _as_of_for(self, rel: Relation) -> Frontier:
        return Frontier.at(self._choose_time(rel, None, ryw=False))

