"""Outer, semi and anti joins, and INTERSECT, lowered to the engine's incremental operators.

Contract: every function here takes protocol plans with their column types and returns a plan
over the same inputs built only from `Join`, `Mfp`, `Distinct`, `UnionAll`, `Negate` and
`Threshold` — so the result is maintained incrementally like any other plan, and the engine
needs no operator of its own for them. Semantics are SQL's: equi-join keys never match NULLs;
a left join keeps every left row with multiplicity, padded with NULLs where nothing on the right
matches (`semi` keeps, `anti` drops, each left row with at least one match, once per copy).

- `left_join(l, r, lk, rk)` = `l ⋈ r  ∪  (l − semi(l, r)) × NULLs`, with
  `semi(l, r) = l ⋈ distinct(π_rk r)`.
- `left_join_on(l, r, lk, rk, residual)`: with a residual predicate over `l ++ r` the matched
  left rows are found as `distinct(π_l σ(l ⋈ r))` and joined back NULL-safely on every column.
- right joins swap the inputs; `full` adds the right rows without a match.
- `intersect_all(a, b) = a − (a − b)⁺` (each row `min(m_a, m_b)` times), thresholded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from twofold.protocol import (
    Call,
    Column,
    ColumnType,
    Distinct,
    Join,
    Mfp,
    Negate,
    Plan,
    Threshold,
    UnionAll,
)
from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral

_EXAMPLE: Final = {"bool": False, "int": 0, "float": 0.0, "str": "", "bytes": b""}


def typed_null(scalar: str) -> PExpr:
    """A NULL of `scalar` type (a bare NULL literal would type as int)."""
    return Call(func="if", args=[PLiteral(value=True), PLiteral(value=None),
                                 PLiteral(value=_EXAMPLE.get(scalar, 0))])


def nullsafe_key(plan: Plan, types: Sequence[ColumnType], cols: Sequence[int]
                 ) -> tuple[Plan, list[int], list[ColumnType]]:
    """`plan` with key columns appended such that equal keys (NULL equal to NULL) match:
    a nullable column `c` becomes the pair `(is_null(c), coalesce(c, zero))`. Returns the
    plan, the key columns and the new plan's column types."""
    maps: list[PExpr] = []
    key: list[int] = []
    out = list(types)
    for c in cols:
        if not types[c].nullable:
            key.append(c)
            continue
        col = Column(index=c)
        maps.append(Call(func="is_null", args=[col]))
        maps.append(Call(func="coalesce", args=[col,
                                                 PLiteral(value=_EXAMPLE[types[c].scalar])]))
        out.extend([ColumnType("bool", False), ColumnType(types[c].scalar, False)])
        key.extend([len(out) - 2, len(out) - 1])
    if not maps:
        return plan, key, out
    return Mfp(input=plan, map=maps), key, out


def _pad(plan: Plan, nleft: int, right_types: Sequence[ColumnType], right_first: bool) -> Plan:
    maps = [typed_null(t.scalar) for t in right_types]
    pads = list(range(nleft, nleft + len(maps)))
    own = list(range(nleft))
    return Mfp(input=plan, map=maps, project=pads + own if right_first else own + pads)


def semi_join(left: Plan, right: Plan, lk: Sequence[int], rk: Sequence[int],
              nleft: int) -> Plan:
    """Each left row (with its multiplicity) that has at least one match on the right."""
    keys = Distinct(input=Mfp(input=right, project=list(rk)))
    joined = Join(left=left, right=keys, left_key=list(lk), right_key=list(range(len(rk))))
    return Mfp(input=joined, project=list(range(nleft)))


def anti_join(left: Plan, right: Plan, lk: Sequence[int], rk: Sequence[int],
              nleft: int) -> Plan:
    """Each left row (with its multiplicity) that has no match on the right (NULL keys never
    match, so their rows are kept)."""
    return UnionAll(inputs=[left, Negate(input=semi_join(left, right, lk, rk, nleft))])


def _matched_semi(left: Plan, ltypes: Sequence[ColumnType], matched: Plan) -> Plan:
    """The left rows that appear (projected) in `matched`, each with its own multiplicity."""
    n = len(ltypes)
    found = Distinct(input=Mfp(input=matched, project=list(range(n))))
    lp, lkey, _ = nullsafe_key(left, ltypes, range(n))
    fp, fkey, _ = nullsafe_key(found, ltypes, range(n))
    return Mfp(input=Join(left=lp, right=fp, left_key=lkey, right_key=fkey),
               project=list(range(n)))


def left_join_on(left: Plan, ltypes: Sequence[ColumnType], right: Plan,
                 rtypes: Sequence[ColumnType], lk: Sequence[int], rk: Sequence[int],
                 residual: Sequence[PExpr] = (), how: str = "left") -> Plan:
    """`left LEFT|FULL JOIN right ON lk = rk AND residual` (residual over `left ++ right`);
    output columns `left ++ right`, the padded side's columns NULL."""
    nl = len(ltypes)
    matched: Plan = Join(left=left, right=right, left_key=list(lk), right_key=list(rk))
    if residual:
        matched = Mfp(input=matched, filter=list(residual))
        unmatched_left: Plan = UnionAll(inputs=[left, Negate(input=_matched_semi(
            left, ltypes, matched))])
    else:
        unmatched_left = anti_join(left, right, lk, rk, nl)
    parts: list[Plan] = [matched, _pad(unmatched_left, nl, rtypes, right_first=False)]
    if how == "full":
        if residual:
            swapped = Mfp(input=matched, project=[*range(nl, nl + len(rtypes)), *range(nl)])
            unmatched_right: Plan = UnionAll(inputs=[right, Negate(input=_matched_semi(
                right, rtypes, swapped))])
        else:
            unmatched_right = anti_join(right, left, rk, lk, len(rtypes))
        parts.append(_pad(unmatched_right, len(rtypes), ltypes, right_first=True))
    return UnionAll(inputs=parts)


def outer_join(left: Plan, ltypes: Sequence[ColumnType], right: Plan,
               rtypes: Sequence[ColumnType], lk: Sequence[int], rk: Sequence[int],
               how: str, residual: Sequence[PExpr] = ()) -> Plan:
    """`how` in `left`, `right`, `full`; columns `left ++ right` in every case."""
    if how == "right":
        nl, nr = len(ltypes), len(rtypes)
        # Residual expressions index left ++ right; over right ++ left they shift.
        shifted = [_shift(e, nl, nr) for e in residual]
        swapped = left_join_on(right, rtypes, left, ltypes, rk, lk, shifted)
        return Mfp(input=swapped, project=[*range(nr, nr + nl), *range(nr)])
    return left_join_on(left, ltypes, right, rtypes, lk, rk, residual, how)


def _shift(e: PExpr, nl: int, nr: int) -> PExpr:
    """Re-index an expression over `l ++ r` to read `r ++ l`."""
    if isinstance(e, Column):
        return Column(index=e.index + nr if e.index < nl else e.index - nl)
    if isinstance(e, Call):
        return Call(func=e.func, args=[_shift(a, nl, nr) for a in e.args])
    return e


def intersect_all(a: Plan, b: Plan) -> Plan:
    """Rows of both, each `min(count in a, count in b)` times."""
    a_minus_b = Threshold(input=UnionAll(inputs=[a, Negate(input=b)]))
    return Threshold(input=UnionAll(inputs=[a, Negate(input=a_minus_b)]))
