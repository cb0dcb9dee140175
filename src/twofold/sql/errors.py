"""Typed SQL errors, each carrying a PostgreSQL SQLSTATE.

Contract: everything `db.sql(...)` raises is a `TwofoldError`; errors found while parsing,
binding or planning are `SqlError` subclasses with a five-character `sqlstate` (so a wire-protocol
server can pass them on unchanged), and `sqlstate_of(exc)` gives the SQLSTATE of any
`TwofoldError` (the API's own errors included: a division by zero found while computing a query
is `22012`, a timeout `57014`). A syntax error names the line and column and shows the statement's
line with a caret under the fault. An unsupported construct is `FeatureNotSupported` naming it
("window functions are not supported").
"""

from __future__ import annotations

from typing import ClassVar

from twofold.api.errors import (
    ColumnNotFound,
    DependencyError,
    DuplicateColumn,
    InvalidArgument,
    InvalidRows,
    ObjectExists,
    QueryFailed,
    QueryTimeout,
    ReadBeforeSince,
    SubscribeEnded,
    TwofoldError,
    TypeMismatch,
    UniqueViolation,
    UnknownObject,
)


class SqlError(TwofoldError):
    """An error in a SQL statement; `sqlstate` is its PostgreSQL error code, `hint` what
    PostgreSQL's HINT field says (pgwire sends it), if anything."""

    sqlstate: ClassVar[str] = "XX000"

    def __init__(self, message: str = "", hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class SqlSyntaxError(SqlError):
    """The statement does not parse (`42601`). `line` and `column` are 1-based."""

    sqlstate = "42601"

    def __init__(self, message: str, text: str = "", line: int = 0, column: int = 0) -> None:
        self.line, self.column = line, column
        if line > 0 and text:
            lines = text.splitlines() or [""]
            src = lines[min(line, len(lines)) - 1]
            caret = " " * max(column - 1, 0) + "^"
            message = f"{message} at line {line}, column {column}\n  {src}\n  {caret}"
        super().__init__(message)


class UndefinedTable(SqlError):
    """A relation name that is not a table, view, index or CTE in scope (`42P01`)."""

    sqlstate = "42P01"


class UndefinedObject(SqlError):
    """An unknown object of another kind, e.g. an index or a session variable (`42704`)."""

    sqlstate = "42704"


class UndefinedColumn(SqlError):
    """A column name no relation in scope has (`42703`)."""

    sqlstate = "42703"


class AmbiguousColumn(SqlError):
    """An unqualified column name several relations in scope have (`42702`)."""

    sqlstate = "42702"


class DuplicateObject(SqlError):
    """`CREATE` of a name that exists (`42P07`)."""

    sqlstate = "42P07"


class DuplicateColumnName(SqlError):
    """A table or view would have two columns of one name (`42701`)."""

    sqlstate = "42701"


class DatatypeMismatch(SqlError):
    """An expression has a type its context cannot use (`42804`)."""

    sqlstate = "42804"


class UndefinedFunction(SqlError):
    """No function or operator of that name for those argument types (`42883`)."""

    sqlstate = "42883"


class GroupingError(SqlError):
    """A column outside `GROUP BY` used outside an aggregate (`42803`)."""

    sqlstate = "42803"


class FeatureNotSupported(SqlError):
    """A valid construct twofold does not implement (`0A000`); the message names it."""

    sqlstate = "0A000"


class InvalidParameter(SqlError):
    """A `$n` parameter without a value, or a value that is not a scalar (`22023`)."""

    sqlstate = "22023"


class NotNullViolation(SqlError):
    """A NULL written into a NOT NULL column (`23502`)."""

    sqlstate = "23502"


class DependentObjects(SqlError, DependencyError):
    """`DROP` of an object others read, without `CASCADE` (`2BP01`): PostgreSQL's message
    and HINT; a `DependencyError` whose `name` and `dependents` say which."""

    sqlstate = "2BP01"


class CardinalityViolation(SqlError):
    """A scalar subquery returned more than one row (`21000`)."""

    sqlstate = "21000"


class InvalidColumnReference(SqlError):
    """DISTINCT ON expressions that are not the leading ORDER BY items (`42P10`)."""

    sqlstate = "42P10"


class WrongObjectType(SqlError):
    """`DROP VIEW` of a table and the like (`42809`)."""

    sqlstate = "42809"


class InvalidTextRepresentation(SqlError):
    """A literal that is not valid input for the type it is read as (`22P02`)."""

    sqlstate = "22P02"


class NumericValueOutOfRange(SqlError):
    """A literal outside its type's range (`22003`)."""

    sqlstate = "22003"


class StringDataRightTruncation(SqlError):
    """A text longer than the `varchar(n)`/`char(n)` column it is written into, past trailing
    spaces (`22001`, `value too long for type character varying(n)`)."""

    sqlstate = "22001"


class InternalError(SqlError):
    """A statement the planner could not handle (`XX000`); the message names it. Reaching this
    is a bug in twofold, reported as an error instead of a traceback."""

    sqlstate = "XX000"


SUBQUERY_ROWS = "more than one row returned by a subquery used as an expression"

# Messages of evaluation errors (docs/semantics.md) and their SQLSTATEs.
_EVAL_STATES = (
    ("division by zero", "22012"),
    ("value too long for type", "22001"),
    ("out of range", "22003"),
    ("invalid input", "22P02"),
    ("square root of a negative number", "2201F"),
    ("raised to a", "2201F"),  # zero to a negative power; a negative to a fraction
    ("cannot take logarithm", "2201E"),
    ("field position must not be zero", "22023"),
    ("negative substring length not allowed", "22011"),
    ("requested length too large", "54000"),
    (SUBQUERY_ROWS, "21000"),
    ("duplicate key", "23505"),
    ("unique", "23505"),
)


def sqlstate_of(exc: BaseException) -> str:
    """The PostgreSQL SQLSTATE of any error `db.sql` can raise (`XX000` if unknown)."""
    if isinstance(exc, SqlError):
        return exc.sqlstate
    explicit = getattr(exc, "sqlstate", None)
    if isinstance(explicit, str):
        return explicit
    text = str(exc)
    if isinstance(exc, QueryTimeout):
        return "57014"
    if isinstance(exc, QueryFailed | InvalidRows | InvalidArgument | SubscribeEnded):
        for needle, state in _EVAL_STATES:
            if needle in text:
                return state
    table = [
        (UniqueViolation, "23505"), (ColumnNotFound, "42703"), (DuplicateColumn, "42701"),
        (TypeMismatch, "42804"),
        (UnknownObject, "42P01"), (ObjectExists, "42P07"), (DependencyError, "2BP01"),
        (ReadBeforeSince, "22000"), (InvalidRows, "22000"), (InvalidArgument, "22023"),
        (QueryFailed, "XX000"),
    ]
    for cls, state in table:
        if isinstance(exc, cls):
            return state
    return "XX000"
