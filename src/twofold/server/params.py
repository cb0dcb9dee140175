"""Parameter types the client left unspecified (OID 0), inferred from where `$n` appears.

Contract: `infer_param_types(db, sql, given)` returns one type OID per parameter `$1..$n` the
statement uses (at least `len(given)`): a client-given non-zero OID is kept; otherwise the type
of the column the parameter is compared with, assigned to (`UPDATE ... SET c = $n`) or inserted
into (`INSERT INTO t (c, ...) VALUES ($n, ...)`), `int8` for `LIMIT`/`OFFSET`, else `text`.
A statement that does not parse gets `text` for its parameters (its error comes at Execute).
"""

from __future__ import annotations

import re
from typing import Any

from sqlglot import exp

from twofold.server.types import OIDS, TEXT

_PARAM = re.compile(r"\$(\d+)")


def _columns(db: Any, names: list[str]) -> dict[str, str]:
    from twofold.sql.planner import Planner

    planner = Planner(db)
    found: dict[str, str] = {}
    for name in names:
        try:
            rel = planner.relation(name)
        except Exception:
            continue
        for c in rel.cols:
            found.setdefault(c.name, c.column_type.scalar)
    return found


def infer_param_types(db: Any, sql: str, given: tuple[int, ...]) -> tuple[int, ...]:
    used = [int(m) for m in _PARAM.findall(sql)]
    n = max([len(given), *used]) if used or given else 0
    oids = [given[i] if i < len(given) else 0 for i in range(n)]
    if all(oids):
        return tuple(oids)
    try:
        from twofold.sql.parser import parse

        tree = parse(sql)
    except Exception:
        return tuple(o or TEXT for o in oids)
    tables = [t.name for t in tree.find_all(exp.Table)]
    cols = _columns(db, tables)

    def put(param: exp.Expr, scalar: str | None) -> None:
        if scalar is None:
            return
        idx = int(param.this.name) - 1 if param.this is not None else -1
        if 0 <= idx < n and oids[idx] == 0:
            oids[idx] = OIDS.get(scalar, TEXT)

    for param in tree.find_all(exp.Parameter, exp.Placeholder):
        parent = param.parent
        if isinstance(parent, exp.Limit | exp.Offset):
            put(param, "int")
        elif isinstance(parent, exp.Binary):
            other = parent.right if parent.left is param else parent.left
            if isinstance(other, exp.Column):
                put(param, cols.get(other.name))
        elif isinstance(parent, exp.Tuple) and isinstance(parent.parent, exp.Values):
            ins = parent.parent.parent
            if isinstance(ins, exp.Insert):
                target = ins.this
                if isinstance(target, exp.Schema) and target.expressions:
                    names = [e.name for e in target.expressions]
                else:
                    names = list(_ordered_columns(db, target.name if target else ""))
                pos = parent.expressions.index(param)
                if pos < len(names):
                    put(param, cols.get(names[pos]))
        elif isinstance(parent, exp.In | exp.Between) and isinstance(parent.this, exp.Column):
            put(param, cols.get(parent.this.name))
    return tuple(o or TEXT for o in oids)


def _ordered_columns(db: Any, name: str) -> list[str]:
    from twofold.sql.planner import Planner

    try:
        return [c.name for c in Planner(db).relation(name).cols if not c.hidden]
    except Exception:
        return []
