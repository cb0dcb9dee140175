"""Arrangement snapshots and the reads over immutable batches.

An `ArrangementSnapshot` is the tuple of an arrangement's data and error batches plus its
`since` and `upper`, taken by `Arrangement.snapshot()`. It is immutable and references only
immutable batches, so any thread may read it while the writer keeps inserting, merging and
compacting. Reads at `t` require `since <= t < upper` (`NotReadableError`) and raise `EvalError`
when the error collection is non-empty at `t`. Key lookups binary-search each batch's sorted
codes (`hashing`) and then filter by exact key equality.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from twofold.engine.batch import Batch, filter_time, gather_hashes
from twofold.engine.consolidation import consolidate, consolidate_sorted, equal_pairs
from twofold.engine.errors import EvalError, InputError, NotReadableError
from twofold.engine.frames import DIFF, ERROR, TIME, empty, names, schema
from twofold.engine.hashing import (
    _U64,
    KEY_MASK,
    ROW_MASK,
    _mix_int,
    key_range,
    row_hash,
    scalar_hashers,
    scalar_row_hash_with,
    sorted_unique,
)
from twofold.engine.ordering import order_frame, row_key
from twofold.protocol import ColumnType, Frontier, RelationDesc

_KEY_MASK = int(KEY_MASK)
_ROW_MASK = int(ROW_MASK)
_NUMPY_EXACT = (pl.Int64, pl.UInt64, pl.Boolean)
_FEW_KEYS = 16  # up to this many keys, a lookup walks batches in Python: no frame overheads
_NAN = object()  # stands for every NaN in a row's identity (NaN != NaN in Python)
_ONE_NAN = math.nan  # every NaN in a lookup key, so a set of keys holds NaN once
# Stands for -0.0 in a row's identity: Python's dict holds -0.0 and 0.0 as one key (keeping the
# first's bits), and consolidation keeps them apart.
_NEG_ZERO = object()
_copysign = math.copysign


def _identity_of(v: object) -> object:
    if v != v:  # NaN
        return _NAN
    if v == 0 and v.__class__ is float and math.copysign(1.0, v) < 0:
        return _NEG_ZERO
    return v


def _collect(
    batches: Sequence[Batch], sch: dict[str, pl.DataType], **bounds: int | None
) -> pl.DataFrame:
    parts = [filter_time(b.data, **bounds) for b in batches]
    parts = [p for p in parts if p.height]
    if not parts:
        return empty({**sch, TIME: pl.UInt64(), DIFF: pl.Int64()})
    return pl.concat(parts, how="vertical", rechunk=False) if len(parts) > 1 else parts[0]


class _Acc:
    """A consolidated collection frame (`c*`, `diff`) with each row's sort code and row hash,
    aligned; `sorted` says whether rows are in code order (then codes can be searched)."""

    __slots__ = ("codes", "frame", "hashes", "sorted")

    def __init__(
        self, frame: pl.DataFrame, codes: np.ndarray, hashes: np.ndarray, *, sorted: bool
    ) -> None:
        self.frame, self.codes, self.hashes, self.sorted = frame, codes, hashes, sorted

    def __len__(self) -> int:
        return self.frame.height


def _batch_collection(batch: Batch, cols: Sequence[str], t: int) -> _Acc:
    """The collection `batch` holds at `t` (its updates at times `<= t`, summed), in code
    order. At `t >= batch.tmax` that is the batch's own (memoised) all-times collection."""
    if t >= batch.tmax:
        memo = batch.memo.get("collection")
        if isinstance(memo, _Acc):
            return memo
        frame, codes, hashes = batch.data, batch.codes, batch.hashes
    else:
        keep = (batch.data.get_column(TIME) <= t).to_numpy()
        frame = batch.data.filter(pl.Series(keep))
        codes, hashes = batch.codes[keep], batch.hashes[keep]
    if batch.tmin == batch.tmax:
        # One time: a consolidated batch already holds each row once.
        acc = _Acc(frame.select([*cols, DIFF]), codes, hashes, sorted=True)
    else:
        # Codes ignore time, so one row's updates at different times are adjacent and sum
        # once `time` is dropped; the (already sorted) order is kept.
        out = consolidate_sorted(frame.select([*cols, DIFF]), codes, hashes)
        acc = _Acc(*out, sorted=True)
    if t >= batch.tmax:
        batch.memo["collection"] = acc
    return acc


def _equal_pairs(a: pl.Series, ia: np.ndarray, b: pl.Series, ib: np.ndarray) -> np.ndarray:
    """Whether `a[ia[i]]` equals `b[ib[i]]` (NULL equal to NULL), per `i`, by SQL equality
    (-0.0 = 0.0): the key match of lookups. Consolidation uses `equal_pairs` (by bits)."""
    if a.dtype in _NUMPY_EXACT and a.null_count() == 0 and b.null_count() == 0:
        eq: np.ndarray = a.to_numpy()[ia] == b.to_numpy()[ib]
        return eq
    return a.gather(pl.Series(ia)).eq_missing(b.gather(pl.Series(ib))).to_numpy()


def _fold(base: _Acc, rest: _Acc, cols: Sequence[str]) -> _Acc:
    """`base + rest` as one consolidated collection, in O(len(base)) copying plus binary
    searches for `rest` (no sort): `base` must be in code order. Rows may have zero diffs
    (cancelled); the result is not in code order."""
    if len(rest) == 0:
        return base
    lo = np.searchsorted(base.codes, rest.codes, "left")
    lens = np.searchsorted(base.codes, rest.codes, "right") - lo
    total = int(lens.sum())
    matched_rest = np.zeros(len(rest), dtype=bool)
    diff = base.frame.get_column(DIFF)
    if total:
        in_rest = np.repeat(np.arange(len(rest)), lens)
        in_base = np.repeat(lo - (np.cumsum(lens) - lens), lens) + np.arange(total)
        m = base.hashes[in_base] == rest.hashes[in_rest]
        in_rest, in_base = in_rest[m], in_base[m]
        for c in cols:
            if not len(in_rest):
                break
            same = equal_pairs(
                base.frame.get_column(c), in_base, rest.frame.get_column(c), in_rest
            )
            in_rest, in_base = in_rest[same], in_base[same]
        if len(in_rest):
            # Both sides are consolidated (distinct rows), so matches pair rows one to one.
            diffs = diff.to_numpy().copy()
            diffs[in_base] += rest.frame.get_column(DIFF).to_numpy()[in_rest]
            diff = pl.Series(DIFF, diffs, pl.Int64)
            matched_rest[in_rest] = True
    frame = base.frame.with_columns(diff)
    codes, hashes = base.codes, base.hashes
    if not matched_rest.all():
        new = ~matched_rest
        frame = pl.concat([frame, rest.frame.filter(pl.Series(new))], how="vertical", rechunk=False)
        codes = np.concatenate([codes, rest.codes[new]])
        hashes = np.concatenate([hashes, rest.hashes[new]])
    return _Acc(frame, codes, hashes, sorted=False)


def _collection(batches: Sequence[Batch], cols: Sequence[str], t: int) -> pl.DataFrame | None:
    """The consolidated collection of `batches` at `t`, or `None` when there are no batches.

    Each batch contributes its collection at `t` (memoised on the batch when `t` is past all
    its times, so repeated reads of an unchanged spine re-sort nothing), and the collections
    are folded smallest into largest by binary search, never by a sort of the whole."""
    if not batches:
        return None
    parts = sorted((_batch_collection(b, cols, t) for b in batches), key=len)
    acc = parts[0]
    for part in parts[1:]:
        acc = _fold(part, acc, cols)
    frame = acc.frame
    if len(parts) > 1:
        frame = frame.filter(pl.col(DIFF) != 0)
    return frame


def _accumulate(updates: pl.DataFrame, cols: Sequence[str]) -> pl.DataFrame:
    """A collection frame (`cols`, `diff`) summing `updates` over all their times."""
    return consolidate(updates.select([*cols, DIFF]), cols)


def _found_rows(found: list[tuple[tuple[Any, ...], int]]) -> list[tuple[list[Any], int]]:
    """`lookup_rows`' answer from the accumulated `(row, count)` pairs: those with a count,
    in the rows' total order (`ordering`: the same whatever order the batches held them in)."""
    if len(found) == 1:  # nothing to sort
        ((r, d),) = found
        return [(list(r), d)] if d else []
    return sorted(((list(r), d) for r, d in found if d), key=lambda rd: row_key(rd[0]))


def _count(row: tuple[Any, ...], acc: dict[tuple[Any, ...], int],
           reps: dict[tuple[Any, ...], tuple[Any, ...]]) -> None:
    """Add found `row` (`(*columns, time, diff)`) to `acc` by its identity — NaN equal to
    NaN and -0.0 apart from 0.0, as consolidation — keeping in `reps` a row for each
    identity that is not the row itself."""
    ident = row[:-2]
    for v in ident:  # a plain loop: no generator per row
        if v != v or (v == 0 and v.__class__ is float and _copysign(1.0, v) < 0):
            ident = tuple(_identity_of(x) for x in ident)
            reps.setdefault(ident, row[:-2])
            break
    acc[ident] = acc.get(ident, 0) + row[-1]


def _counted(acc: dict[tuple[Any, ...], int], reps: dict[tuple[Any, ...], tuple[Any, ...]]
             ) -> list[tuple[tuple[Any, ...], int]]:
    """`_count`'s totals as `(row, count)` pairs."""
    if not reps:  # no NaN, no -0.0: every identity is its row
        return list(acc.items())
    return [(reps.get(r, r), d) for r, d in acc.items()]


def _accumulate_key(rows: list[tuple[Any, ...]], key: Any, t: int, column: int
                    ) -> list[tuple[tuple[Any, ...], int]]:
    """`(row, count)` of the candidate `rows` (a key hash's rows) at or before `t` whose
    `column` equals `key` in SQL's sense where NaN = NaN (as `_lookup_few`)."""
    acc: dict[tuple[Any, ...], int] = {}
    reps: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for row in rows:
        if row[-2] > t:
            continue
        v = row[column]
        if v != key and (v == v or key == key):
            continue
        _count(row, acc, reps)
    return _counted(acc, reps)


_MANY_EACH = 4
"""From this many keys `lookup_rows_each` searches a one-column key's batches for all of
them at once (`_lookup_each_single`)."""


@functools.lru_cache(maxsize=256)
def _key_dtypes(types: tuple[ColumnType, ...], key: tuple[int, ...]) -> list[pl.DataType]:
    sch = schema(types)
    return [sch[f"c{i}"] for i in key]


@functools.lru_cache(maxsize=256)
def _key_hashers(types: tuple[ColumnType, ...],
                 key: tuple[int, ...]) -> tuple[Callable[[object], int], ...]:
    return scalar_hashers(_key_dtypes(types, key))


def gather_keys(
    batches: Sequence[Batch], keys: pl.DataFrame
) -> tuple[pl.DataFrame, np.ndarray, np.ndarray] | None:
    """Candidate updates for the key rows of `keys` (columns positional to the arrangement's
    key) with their codes and hashes: every update of those keys, plus any of other keys
    whose hash shares the prefix. `None` when there are none."""
    hashes = sorted_unique(row_hash(keys, list(keys.columns)) & KEY_MASK)
    parts = [p for b in batches if (p := gather_hashes(b, hashes)) is not None]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return (
        pl.concat([p[0] for p in parts], how="vertical", rechunk=False),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
    )


def lookup_batches(
    batches: Sequence[Batch],
    key_cols: Sequence[str],
    keys: pl.DataFrame,
    *,
    le: int | None = None,
    nulls_equal: bool = False,
) -> pl.DataFrame | None:
    """Updates (time <= `le` when given) whose key equals a row of `keys` (columns positional
    to `key_cols`, distinct), exactly. `None` when nothing matches."""
    if not nulls_equal:
        keys = keys.drop_nulls()  # SQL equality: a NULL key matches nothing
    if keys.height == 0:
        return None
    hashes = row_hash(keys, list(keys.columns)) & KEY_MASK
    # Sorted distinct hashes, each with one probe row holding it.
    order = np.argsort(hashes)
    sorted_hashes = hashes[order]
    head = np.concatenate(([True], sorted_hashes[1:] != sorted_hashes[:-1]))
    uniq, first = sorted_hashes[head], order[head]
    lo_codes, hi_codes = key_range(uniq)
    frames: list[pl.DataFrame] = []
    owners: list[np.ndarray] = []
    for b in batches:
        if len(b) == 0:
            continue
        starts = np.searchsorted(b.codes, lo_codes, "left")
        lens = np.searchsorted(b.codes, hi_codes, "right") - starts
        total = int(lens.sum())
        if total == 0:
            continue
        hit = lens > 0
        starts, lens = starts[hit], lens[hit]
        idx = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(total)
        owner = np.repeat(first[hit], lens)  # the probe row whose hash range holds each row
        frame = b.data[idx]
        if le is not None and b.tmax > le:
            keep = (frame.get_column(TIME) <= le).to_numpy()
            frame, owner = frame.filter(pl.Series(keep)), owner[keep]
        frames.append(frame)
        owners.append(owner)
    if not frames:
        return None
    found = pl.concat(frames, how="vertical", rechunk=False) if len(frames) > 1 else frames[0]
    if len(uniq) == keys.height:
        # Every probe key has a hash range of its own: a found row matches exactly when its
        # key equals the key of the probe row owning its range.
        owner = np.concatenate(owners) if len(owners) > 1 else owners[0]
        same = np.ones(found.height, dtype=bool)
        for c, k in zip(key_cols, keys.columns, strict=True):
            same &= _equal_pairs(
                found.get_column(c), np.arange(found.height), keys.get_column(k), owner
            )
        return found.filter(pl.Series(same)) if not same.all() else found
    probe = keys.rename({c: f"_k{j}" for j, c in enumerate(keys.columns)})
    on = [f"_k{j}" for j in range(len(key_cols))]
    # Key columns are aliased rather than renamed: a key may name one column twice.
    found = found.with_columns([pl.col(c).alias(k) for c, k in zip(key_cols, on, strict=True)])
    return found.join(probe, on=on, how="semi", nulls_equal=nulls_equal).drop(on)


@dataclass(frozen=True, slots=True, eq=False)
class ArrangementSnapshot:
    """An immutable view of an arrangement: its batches, `since` and `upper`.

    Holding a snapshot keeps exactly its batches alive (never a copy). Every method is a pure
    read and safe from any thread.
    """

    desc: RelationDesc
    key: tuple[int, ...]
    data: tuple[Batch, ...]
    errors: tuple[Batch, ...]
    since: Frontier
    upper: Frontier

    @property
    def columns(self) -> list[str]:
        return names(self.desc.arity)

    def __len__(self) -> int:
        """Number of stored updates (not of rows at any one time)."""
        return sum(len(b) for b in self.data)

    def check_readable(self, t: int) -> None:
        """`NotReadableError` unless `since <= t < upper`."""
        if not self.upper.readable_at(t, since=self.since):
            raise NotReadableError(
                f"cannot read at {t}: readable window is since {self.since} <= t < upper "
                f"{self.upper}"
            )

    def errors_at(self, t: int) -> list[tuple[str, int]]:
        """The error collection at `t` as `(message, count)` pairs, sorted."""
        self.check_readable(t)
        errs = _accumulate(_collect(self.errors, {ERROR: pl.String()}, le=t), [ERROR])
        return sorted((str(m), int(d)) for m, d in errs.iter_rows())

    def check_errors(self, t: int) -> None:
        """`EvalError` with the smallest message if the error collection is non-empty at `t`."""
        if self.errors:
            errs = self.errors_at(t)
            if errs:
                raise EvalError(errs[0][0])

    def read(self, t: int) -> pl.DataFrame:
        """The collection at `t` as a collection frame (`c*`, `diff`), unordered.

        Costs no sort of the arrangement: each batch's collection is memoised on the
        (immutable) batch once it is read at a time past all its updates."""
        self.check_readable(t)
        self.check_errors(t)
        frame = _collection(self.data, self.columns, t)
        if frame is None:
            return empty({**schema(self.desc.types), DIFF: pl.Int64()})
        return frame

    def read_rows(self, t: int) -> list[tuple[list[Any], int]]:
        """The collection at `t` as `(row, count)` pairs sorted by row."""
        frame = self.read(t)
        if self.columns:
            frame = order_frame(frame, (), len(self.columns))
        return [(list(r[:-1]), int(r[-1])) for r in frame.iter_rows()]

    def lookup(self, keys: Sequence[Sequence[Any]] | pl.DataFrame, t: int) -> pl.DataFrame:
        """The rows at `t` whose key (the arrangement's key columns, in order) equals one of
        `keys`, as a collection frame. NULL keys match nothing (SQL equality)."""
        self.check_readable(t)
        self.check_errors(t)
        key_cols = [f"c{i}" for i in self.key]
        probe = self._probe(keys)
        found = lookup_batches(self.data, key_cols, probe, le=t)
        if found is None:
            return empty({**schema(self.desc.types), DIFF: pl.Int64()})
        if len(self.data) == 1 and self.data[0].tmin == self.data[0].tmax:
            # One consolidated batch, one time: every row is already distinct.
            return found.drop(TIME)
        return _accumulate(found, self.columns)

    def lookup_rows(self, keys: Sequence[Sequence[Any]], t: int) -> list[tuple[list[Any], int]]:
        """Like `lookup`, as `(row, count)` pairs sorted by row. For a few keys this walks the
        batches in plain Python around numpy binary searches (microseconds per key); for many
        it uses the vectorised `lookup`."""
        self.check_readable(t)
        self.check_errors(t)
        if len(keys) == 1:  # a point lookup: no set of keys to build
            k = keys[0]
            distinct = {k if type(k) is tuple else tuple(k)}
        else:
            # Every NaN as one object: a set holds two NaN objects apart (NaN != NaN), and a
            # NaN key must be looked up once (SQL equality: NaN = NaN).
            distinct = {
                tuple(_ONE_NAN if v != v else v for v in k) if any(v != v for v in k)
                else tuple(k)
                for k in keys
            }
        for k in distinct:
            if len(k) != len(self.key):
                raise InputError(
                    f"lookup key {list(k)!r} has {len(k)} values, key is {list(self.key)}"
                )
        if len(distinct) > _FEW_KEYS:
            frame = self.lookup([list(k) for k in distinct], t)
            # Pairs, not a dict: a dict holds -0.0 and 0.0 as one key.
            found = [(tuple(r[:-1]), int(r[-1])) for r in frame.iter_rows()]
        else:
            found = self._lookup_few(distinct, t)
        return _found_rows(found)

    def lookup_rows_each(self, keys: Sequence[Sequence[Any]],
                         t: int) -> list[list[tuple[list[Any], int]] | None]:
        """`[lookup_rows([k], t) for k in keys]` with the readability and error checks made
        once (raising as `lookup_rows` does when they fail); a key `lookup_rows([k], t)`
        would raise for is None in its place."""
        self.check_readable(t)
        self.check_errors(t)
        n = len(self.key)
        if n == 1 and len(keys) >= _MANY_EACH:
            try:
                return self._lookup_each_single(keys, t)
            except Exception:
                pass  # one key at a time below, each failing alone
        out: list[list[tuple[list[Any], int]] | None] = []
        for k in keys:
            key = k if type(k) is tuple else tuple(k)
            if len(key) != n:
                out.append(None)  # `lookup_rows`' InputError
                continue
            try:
                out.append(_found_rows(self._lookup_few({key}, t)))
            except Exception:
                out.append(None)
        return out

    def _lookup_each_single(self, keys: Sequence[Sequence[Any]],
                            t: int) -> list[list[tuple[list[Any], int]] | None]:
        """`lookup_rows_each` on a one-column key, the batches searched for every key at once:
        per batch two vectorised binary searches (one numpy call each, against two per key),
        then each key's candidate rows read and accumulated as `_lookup_few` does
        (`_accumulate_key`)."""
        hasher = _key_hashers(tuple(self.desc.types), self.key)[0]
        single = self.key[0]
        values: list[Any] = []
        out: list[list[tuple[list[Any], int]] | None] = [None] * len(keys)
        hashes: list[int] = []
        probed: list[int] = []  # positions of `keys` probed (not NULL)
        for i, k in enumerate(keys):
            if len(k) != 1:
                continue  # `lookup_rows`' InputError: None
            v = k[0]
            if v is None:
                out[i] = []  # SQL equality: a NULL key matches nothing
                continue
            hashes.append(_mix_int(hasher(v) & _U64) & _KEY_MASK)
            values.append(v)
            probed.append(i)
        candidates: list[list[tuple[Any, ...]]] = [[] for _ in probed]
        if probed:
            lo = np.array(hashes, dtype=np.uint64)
            hi = lo | np.uint64(_ROW_MASK)
            for b in self.data:
                codes = b.codes
                starts = codes.searchsorted(lo, "left")
                ends = codes.searchsorted(hi, "right")
                counts = ends - starts
                hit = np.flatnonzero(counts)
                if not len(hit):
                    continue
                data = b.data
                for j, start, end in zip(hit.tolist(), starts[hit].tolist(), ends[hit].tolist(),
                                         strict=True):
                    # One row per key, mostly (a unique key): `row` costs less than a
                    # gather of them all (~0.6 against ~1.3 us a row here).
                    if end - start == 1:
                        candidates[j].append(data.row(start))
                    else:
                        candidates[j].extend(data.slice(start, end - start).rows())
        for j, i in enumerate(probed):
            out[i] = _found_rows(_accumulate_key(candidates[j], values[j], t, single))
        return out

    def _lookup_few(self, keys: set[tuple[Any, ...]], t: int) -> list[tuple[tuple[Any, ...], int]]:
        hashers = _key_hashers(tuple(self.desc.types), self.key)
        acc: dict[tuple[Any, ...], int] = {}
        reps: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # NaN/-0.0-free identity -> a row
        single = self.key[0] if len(self.key) == 1 else None
        positions = list(enumerate(self.key))
        for key in keys:
            if None in key:
                continue  # SQL equality: a NULL key matches nothing
            if single is not None:
                # `scalar_row_hash_with` of one value, inlined (its fold's first step)
                h = _mix_int(hashers[0](key[0]) & _U64) & _KEY_MASK
            else:
                h = scalar_row_hash_with(key, hashers) & _KEY_MASK
            lo, hi = np.uint64(h), h | _ROW_MASK
            for b in self.data:
                codes = b.codes
                start = int(codes.searchsorted(lo, "left"))
                n = len(codes)
                if start == n or int(codes[start]) > hi:
                    continue  # no code of this key's hash: one binary search, not two
                if start + 1 == n or int(codes[start + 1]) > hi:
                    end = start + 1  # one row of it (a unique key): no second search
                else:
                    end = int(codes.searchsorted(np.uint64(hi), "right"))
                rows = (
                    [b.data.row(start)]
                    if end - start == 1
                    else b.data.slice(start, end - start).rows()
                )
                for row in rows:
                    # row is (*columns, time, diff)
                    if row[-2] > t:
                        continue
                    # SQL equality, where NaN = NaN (as PostgreSQL's, and as the key hash)
                    if single is not None:
                        v = row[single]
                        if v != key[0] and (v == v or key[0] == key[0]):
                            continue
                    elif not all(
                        row[i] == key[j] or (row[i] != row[i] and key[j] != key[j])
                        for j, i in positions
                    ):
                        continue
                    _count(row, acc, reps)
        return _counted(acc, reps)

    def _probe(self, keys: Sequence[Sequence[Any]] | pl.DataFrame) -> pl.DataFrame:
        sch = {f"k{j}": schema(self.desc.types)[f"c{i}"] for j, i in enumerate(self.key)}
        if isinstance(keys, pl.DataFrame):
            probe = keys.rename(dict(zip(keys.columns, sch, strict=True))).cast(sch)  # type: ignore[arg-type]
        else:
            for k in keys:
                if len(k) != len(self.key):
                    raise InputError(f"lookup key {k!r} has {len(k)} values, key is {self.key}")
            try:
                probe = pl.DataFrame([list(k) for k in keys], schema=sch, orient="row")
            except Exception as e:
                raise InputError(f"lookup keys do not match key columns {self.key}: {e}") from None
        return probe.unique()

    def updates_through(self, t: int) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Data and error updates with time `<= t`, all advanced to `t` (an import's snapshot
        at its `as_of`). Requires `since <= t < upper`."""
        self.check_readable(t)
        data = _collect(self.data, schema(self.desc.types), le=t)
        errs = _collect(self.errors, {ERROR: pl.String()}, le=t)
        lit = pl.lit(t, pl.UInt64).alias(TIME)
        return data.with_columns(lit), errs.with_columns(lit)

    def updates_between(self, lower: int, upper: Frontier) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Data and error updates with `lower <= time` and time not in `upper` (the batches an
        importer has not yet consumed). Requires `since < lower` — an importer holds the since
        at the last time it consumed — and `upper <= self.upper`."""
        if lower > 0 and not self.since.less_equal(Frontier.at(lower - 1)):
            raise NotReadableError(
                f"cannot read updates from {lower}: since {self.since} has passed it"
            )
        if not upper.less_equal(self.upper):
            raise NotReadableError(f"cannot read updates up to {upper}: upper is {self.upper}")
        lt = upper.time
        data = _collect(self.data, schema(self.desc.types), ge=lower, lt=lt)
        errs = _collect(self.errors, {ERROR: pl.String()}, ge=lower, lt=lt)
        return data, errs
