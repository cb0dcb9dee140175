"""What `CREATE MATERIALIZED VIEW` checks once the view exists: PostgreSQL runs the view's
query when it creates it, so a query that fails over the rows there are (`1/i` over a zero)
fails the statement and creates nothing.

Contract of `check_first_contents(db, view)`: it reads `view` (no rows: a `LIMIT 0` over it,
which still carries the view's errors) at the first time reads see it. When that read fails
with an evaluation error of the data (a `QueryFailed` whose SQLSTATE is PostgreSQL's for it —
`22012`, `22003`, `21000`, `22001`, ...), the view is dropped again and that error is raised:
`QueryFailed` with the evaluation error as its `primary` (what the pgwire server sends, as
PostgreSQL's `division by zero`). Any other outcome returns: a view whose rows compute, and
also one whose dataflow could not be built (`XX000`) or whose first read timed out (`57014`)
— the system's failures rather than the query's, which reads of the view go on reporting.
An error that appears later (a write after the creation) is the view's error at that time,
reported by its reads and gone when the rows retract (`docs/sql.md`, "Errors").
"""

from __future__ import annotations

import contextlib
from typing import Any

from twofold.api.errors import QueryFailed, TwofoldError
from twofold.sql.errors import sqlstate_of


async def check_first_contents(db: Any, view: Any) -> None:
    """Fail (and drop `view`) when its query fails over the rows at its creation."""
    try:
        await db.query(view.limit(0))
    except QueryFailed as e:
        if sqlstate_of(e) == "XX000":
            return  # not the data's failure: reads of the view report it
        with contextlib.suppress(TwofoldError):  # something reads it already (created
            await db.drop(view.name)  # meanwhile): it stays, in error, as reads report
        primary = e.primary or str(e)
        raise QueryFailed(f"creating materialized view {view.name!r} failed: {primary}",
                          primary) from None
    except TwofoldError:
        return  # a timeout or an unavailable replica: the view exists and keeps starting


__all__ = ["check_first_contents"]
