"""Type checking of expressions, plans and dataflows against their inputs' `RelationDesc`s.

Runs before anything is rendered, so an ill-typed plan never reaches an operator: every failure
is a `PlanError` whose message names the plan node (as a path from the dataflow's root, e.g.
`objects_to_build[0] u1: Mfp.input/Join`) and the column or expression at fault. The typing rules
are those of `docs/semantics.md` ("Types"): arithmetic on int/float (int only when every argument
is int), comparisons within one type (int and float compare numerically), and so on.

A NULL literal has no type of its own; it is typed by context (`_NULL`), and a column made only
of NULLs defaults to a nullable `int`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from twofold.engine.errors import PlanError
from twofold.engine.functions import MATH_FUNCTIONS, STRING_FUNCTIONS
from twofold.protocol import (
    Call,
    Column,
    ColumnType,
    Constant,
    DataflowDescription,
    Distinct,
    Expr,
    Get,
    GlobalId,
    Join,
    Literal,
    Mfp,
    Negate,
    Plan,
    Reduce,
    RelationDesc,
    Threshold,
    TopK,
    UnionAll,
)

_NULL: Final = "null"  # the scalar "type" of a NULL literal: compatible with every type
_NUMERIC: Final = frozenset({"int", "float", _NULL})
_CASTABLE: Final = frozenset({"bool", "int", "float", "str", _NULL})
_PY_SCALAR: Final = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}

Ty = tuple[str, bool]  # (scalar or _NULL, nullable)


def _ct(ty: Ty) -> ColumnType:
    scalar, nullable = ty
    return ColumnType("int" if scalar == _NULL else scalar, nullable)  # type: ignore[arg-type]


def _unify(tys: Sequence[Ty], where: str, what: str) -> str:
    """The common scalar of `tys` (int/float promote to float); `PlanError` if none."""
    scalars = {s for s, _ in tys} - {_NULL}
    if not scalars:
        return _NULL
    if len(scalars) == 1:
        return scalars.pop()
    if scalars == {"int", "float"}:
        return "float"
    raise PlanError(f"{where}: {what} need one type, got {sorted(scalars)}")


def expr_type(expr: Expr, types: Sequence[ColumnType], where: str) -> Ty:
    """The (scalar, nullable) of `expr` over input columns `types`; `_NULL` for NULL literals."""
    match expr:
        case Column(index=i):
            if i >= len(types):
                raise PlanError(f"{where}: column {i} does not exist (input has {len(types)})")
            return (types[i].scalar, types[i].nullable)
        case Literal(value=v):
            if v is None:
                return (_NULL, True)
            return (_PY_SCALAR[type(v)], False)
        case Call(func=func, args=args):
            arg_tys = [expr_type(a, types, f"{where}/{func}[{j}]") for j, a in enumerate(args)]
            return _call_type(func, arg_tys, f"{where}/{func}")
    raise PlanError(f"{where}: not an expression: {expr!r}")


def _require(tys: Sequence[Ty], allowed: frozenset[str] | set[str], where: str, what: str) -> None:
    for j, (s, _) in enumerate(tys):
        if s != _NULL and s not in allowed:
            raise PlanError(f"{where}: argument {j} is {s}, expected {what}")


def _call_type(func: str, tys: list[Ty], where: str) -> Ty:
    nullable = any(n for _, n in tys)
    if func in ("add", "sub", "mul", "div", "fdiv", "mod", "floordiv", "floormod", "neg", "abs"):
        _require(tys, _NUMERIC, where, "int or float")
        scalars = {s for s, _ in tys} | ({"float"} if func == "fdiv" else set())
        return ("float" if "float" in scalars else "int", nullable)
    if func in ("eq", "ne", "lt", "le", "gt", "ge"):
        _unify(tys, where, "compared values")
        return ("bool", nullable)
    if func in ("and", "or", "not"):
        _require(tys, {"bool"}, where, "bool")
        return ("bool", nullable)
    if func == "is_null":
        return ("bool", False)
    if func == "coalesce":
        return (_unify(tys, where, "coalesce arguments"), all(n for _, n in tys))
    if func == "if":
        _require(tys[:1], {"bool"}, where, "a bool condition")
        return (_unify(tys[1:], where, "if branches"), tys[1][1] or tys[2][1])
    if func in ("concat", "lower", "upper", "length", "like"):
        _require(tys, {"str"}, where, "str")
        out = {"length": "int", "like": "bool"}.get(func, "str")
        return (out, nullable)
    if func in ("cast_int", "cast_float", "cast_str"):
        _require(tys, _CASTABLE, where, "bool, int, float or str")
        return ({"cast_int": "int", "cast_float": "float"}.get(func, "str"), nullable)
    if func in ("check_int2", "check_int4"):
        _require(tys, {"int"}, where, "int")
        return ("int", nullable)
    if func == "round_float4":
        _require(tys, _NUMERIC, where, "int or float")
        return ("float", nullable)
    if func in ("float4_text", "float8_text"):
        _require(tys, {"float"}, where, "float")
        return ("str", nullable)
    if func in ("round", "floor", "ceil"):
        _require(tys, _NUMERIC, where, "int or float")
        if func == "round":
            _require(tys[1:], {"int"}, where, "int digits")
            return ("float", nullable)
        return ("int" if tys[0][0] == "int" else "float", nullable)
    if func in ("trim", "ltrim", "rtrim"):
        _require(tys, {"str"}, where, "str")
        return ("str", nullable)
    if func == "substr":
        _require(tys[:1], {"str"}, where, "str")
        _require(tys[1:], {"int"}, where, "int positions")
        return ("str", nullable)
    if func in MATH_FUNCTIONS:
        _require(tys, _NUMERIC, where, "int or float")
        return ("float", nullable)
    if func in STRING_FUNCTIONS:
        for j, want in enumerate(STRING_FUNCTIONS[func][0]):
            _require(tys[j:j + 1], {want}, where, want)
        return (STRING_FUNCTIONS[func][1], nullable)
    if func == "error":
        _require(tys, {"str"}, where, "a str message")
        return (_NULL, True)
    raise PlanError(f"{where}: unknown function {func!r}")


def typecheck_expr(expr: Expr, types: Sequence[ColumnType], where: str = "expr") -> ColumnType:
    """The `ColumnType` of `expr` over input column `types`; `PlanError` if ill-typed."""
    return _ct(expr_type(expr, types, where))


def _check_cols(cols: Sequence[int], arity: int, where: str, what: str) -> None:
    for c in cols:
        if not 0 <= c < arity:
            raise PlanError(f"{where}: {what} column {c} does not exist (input has {arity})")


def _constant_desc(plan: Constant, where: str) -> RelationDesc:
    if not plan.rows:
        return RelationDesc([], [])
    arity = len(plan.rows[0][0])
    cols: list[list[Ty]] = [[] for _ in range(arity)]
    for row, _ in plan.rows:
        if len(row) != arity:
            raise PlanError(f"{where}: rows have {arity} and {len(row)} columns")
        for j, v in enumerate(row):
            cols[j].append((_NULL, True) if v is None else (_PY_SCALAR[type(v)], False))
    types = [
        _ct((_unify(c, where, f"values of column {j}"), any(n for _, n in c)))
        for j, c in enumerate(cols)
    ]
    return RelationDesc([f"c{j}" for j in range(arity)], types)


def typecheck_plan(
    plan: Plan, inputs: Mapping[GlobalId, RelationDesc], where: str = "plan"
) -> RelationDesc:
    """The output `RelationDesc` of `plan` given its inputs' descs; `PlanError` if ill-typed."""
    name = type(plan).__name__
    here = f"{where}/{name}"
    match plan:
        case Get(id=gid):
            if gid not in inputs:
                raise PlanError(f"{here}: unknown collection {gid}; known: {sorted(inputs)}")
            return inputs[gid]
        case Constant():
            return _constant_desc(plan, here)
        case Mfp(input=inp, map=maps, filter=filters, project=project):
            desc = typecheck_plan(inp, inputs, f"{here}.input")
            names, types = list(desc.names), list(desc.types)
            for j, m in enumerate(maps):
                types.append(typecheck_expr(m, types, f"{here}.map[{j}]"))
                names.append(f"map{j}")
            for j, f in enumerate(filters):
                ft = expr_type(f, types, f"{here}.filter[{j}]")
                if ft[0] not in ("bool", _NULL):
                    raise PlanError(f"{here}.filter[{j}]: predicate is {ft[0]}, expected bool")
            if project is not None:
                _check_cols(project, len(types), here, "project")
                return RelationDesc([names[c] for c in project], [types[c] for c in project])
            return RelationDesc(names, types)
        case Join(left=left, right=right, left_key=lk, right_key=rk):
            ld = typecheck_plan(left, inputs, f"{here}.left")
            rd = typecheck_plan(right, inputs, f"{here}.right")
            _check_cols(lk, ld.arity, here, "left_key")
            _check_cols(rk, rd.arity, here, "right_key")
            for a, b in zip(lk, rk, strict=True):
                tys = [(ld.types[a].scalar, True), (rd.types[b].scalar, True)]
                _unify(tys, f"{here} key left {a} = right {b}", "join keys")
            return RelationDesc([*ld.names, *rd.names], [*ld.types, *rd.types])
        case Reduce(input=inp, group_key=gk, aggregates=aggs):
            desc = typecheck_plan(inp, inputs, f"{here}.input")
            _check_cols(gk, desc.arity, here, "group_key")
            names = [desc.names[c] for c in gk]
            types = [desc.types[c] for c in gk]
            for j, agg in enumerate(aggs):
                if agg.column is None:
                    names.append("count")
                    types.append(ColumnType("int", False))
                    continue
                _check_cols([agg.column], desc.arity, f"{here}.aggregates[{j}]", agg.func)
                ct = desc.types[agg.column]
                names.append(f"{agg.func}_{desc.names[agg.column]}")
                if agg.func == "count":
                    types.append(ColumnType("int", False))
                elif agg.func == "sum":
                    if ct.scalar not in ("int", "float"):
                        raise PlanError(
                            f"{here}.aggregates[{j}]: sum of column {agg.column} "
                            f"({desc.names[agg.column]}) of type {ct.scalar}"
                        )
                    types.append(ColumnType(ct.scalar, ct.nullable or not gk))
                elif agg.func in ("var_samp", "var_pop"):
                    if ct.scalar not in ("int", "float"):
                        raise PlanError(
                            f"{here}.aggregates[{j}]: {agg.func} of column {agg.column} "
                            f"({desc.names[agg.column]}) of type {ct.scalar}"
                        )
                    types.append(ColumnType("float", True))
                elif agg.func == "string_agg":
                    if ct.scalar != "str":
                        raise PlanError(
                            f"{here}.aggregates[{j}]: string_agg of column {agg.column} "
                            f"({desc.names[agg.column]}) of type {ct.scalar}"
                        )
                    types.append(ColumnType("str", ct.nullable or not gk))
                else:
                    # No group key: the row over no input has NULL here.
                    types.append(ColumnType(ct.scalar, ct.nullable or not gk))
            return RelationDesc(names, types)
        case TopK(input=inp, group_key=gk, order_by=order):
            desc = typecheck_plan(inp, inputs, f"{here}.input")
            _check_cols(gk, desc.arity, here, "group_key")
            _check_cols([o.column for o in order], desc.arity, here, "order_by")
            return desc
        case UnionAll(inputs=parts):
            descs = [typecheck_plan(p, inputs, f"{here}.inputs[{j}]") for j, p in enumerate(parts)]
            first = descs[0]
            utypes = list(first.types)
            for j, d in enumerate(descs[1:], 1):
                if d.arity != first.arity:
                    raise PlanError(
                        f"{here}: input {j} has {d.arity} columns, input 0 has {first.arity}"
                    )
                for c, (ta, tb) in enumerate(zip(utypes, d.types, strict=True)):
                    if ta.scalar != tb.scalar:
                        raise PlanError(
                            f"{here}: column {c} is {ta.scalar} in input 0 but "
                            f"{tb.scalar} in input {j}"
                        )
                    utypes[c] = ColumnType(ta.scalar, ta.nullable or tb.nullable)
            return RelationDesc(list(first.names), utypes)
        case Negate(input=inp) | Threshold(input=inp) | Distinct(input=inp):
            return typecheck_plan(inp, inputs, f"{here}.input")
    raise PlanError(f"{where}: not a plan: {plan!r}")


def typecheck_dataflow(
    desc: DataflowDescription, index_relations: Mapping[GlobalId, RelationDesc] | None = None
) -> dict[GlobalId, RelationDesc]:
    """Type every object the dataflow builds, in order, against its imports (and, for index
    imports, `index_relations` overriding the `IndexImport.relation`). Checks exports name known
    collections with matching arity and valid keys. Returns every collection's desc."""
    known: dict[GlobalId, RelationDesc] = {}
    for gid, src in desc.source_imports.items():
        known[gid] = src.desc
    for gid, imp in desc.index_imports.items():
        rel = (index_relations or {}).get(gid, imp.relation)
        _check_cols(imp.desc.key, rel.arity, f"index_imports[{gid}]", "key")
        known[gid] = rel
    for j, build in enumerate(desc.objects_to_build):
        where = f"objects_to_build[{j}] {build.id}:"
        if build.id in known:
            raise PlanError(f"{where} id {build.id} is already defined")
        known[build.id] = typecheck_plan(build.plan, known, where)
    for gid, (idx, rel) in desc.index_exports.items():
        where = f"index_exports[{gid}]"
        if idx.on_id not in known:
            raise PlanError(f"{where}: exports unknown collection {idx.on_id}")
        if known[idx.on_id].arity != rel.arity:
            raise PlanError(
                f"{where}: relation has {rel.arity} columns, {idx.on_id} has "
                f"{known[idx.on_id].arity}"
            )
        _check_cols(idx.key, rel.arity, where, "key")
    for gid, sink in desc.sink_exports.items():
        if sink.from_id not in known:
            raise PlanError(f"sink_exports[{gid}]: reads unknown collection {sink.from_id}")
    return known
