"""Parsing SQL text into one statement tree: sqlglot's PostgreSQL dialect, extended.

Contract: `parse(text)` returns exactly one statement as a sqlglot expression, or raises
`SqlSyntaxError` (42601) with the line, column and a caret excerpt. The `Twofold` dialect adds
Materialize's statements that sqlglot does not know, as nodes of their own:

- `SUBSCRIBE [TO] obj | (query) [WITH (SNAPSHOT [= bool], PROGRESS [= bool])] [AS OF t]
  [UP TO t]` → `Subscribe`;
- `SELECT ... AS OF t` → `AsOf(this=query, expression=t)` (sqlglot alone reads `AS OF` as an
  alias);
- `CREATE [DEFAULT] INDEX [name] ON obj [(expr, ...)]` → `CreateIndex`;
- `SHOW TABLES | VIEWS | MATERIALIZED VIEWS | INDEXES [ON obj] | COLUMNS FROM obj | CREATE
  [kind] obj | <variable>` → `Show`;
- `EXPLAIN [PLAN FOR] query` → `Explain`.

Statements sqlglot hands back as an opaque `Command` are refused here as unsupported, naming
the command. Unquoted identifiers are folded to lower case, quoted ones kept, as in PostgreSQL.
"""

from __future__ import annotations

import asyncio
import collections
import re
import threading
from typing import Any, Final

import sqlglot
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ErrorLevel, ParseError, TokenError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers
from sqlglot.tokenizer_core import TokenizerCore
from sqlglot.tokens import TokenType  # type: ignore[attr-defined]

from twofold.sql import escapestring
from twofold.sql.errors import FeatureNotSupported, SqlSyntaxError


class Subscribe(exp.Expression):
    """`SUBSCRIBE`: `this` is a `Table` or a query; options as parsed."""

    arg_types = {"this": True, "snapshot": False, "progress": False, "as_of": False,
                 "up_to": False}


class AsOf(exp.Expression):
    """A query read at a timestamp: `this` the query, `expression` the time."""

    arg_types = {"this": True, "expression": True}


class CreateIndex(exp.Expression):
    """`CREATE [DEFAULT] INDEX [name] ON obj (exprs)`; `expressions` empty for a default
    index (keyed by every column)."""

    arg_types = {"this": False, "table": True, "expressions": False, "default": False,
                 "exists": False}


class Show(exp.Expression):
    """`SHOW <what> [ON|FROM obj]`: `this` the upper-cased kind, `table` the object."""

    arg_types = {"this": True, "table": False, "kind": False}


class Explain(exp.Expression):
    """`EXPLAIN [PLAN FOR] query`."""

    arg_types = {"this": True}


_SHOW_KINDS = ("MATERIALIZED VIEWS", "TABLES", "VIEWS", "INDEXES", "OBJECTS", "COLUMNS",
               "CREATE")


class _Core(TokenizerCore):
    """sqlglot's tokenizer, where `$` before a digit is always a parameter (`$1,$2`): a
    dollar-quote tag never starts with a digit (PostgreSQL's rule)."""

    __slots__ = ()

    def _scan_string(self, start: str) -> bool:
        if start == "$" and self._peek.isdigit():
            self._add(TokenType.PARAMETER)
            return True
        return bool(super()._scan_string(start))

    def _scan_number(self) -> None:
        # sqlglot reads `1e9+0.1` as one number (the sign after the exponent's digits taken
        # for the exponent's): end the number at the exponent's digits.
        m = _EXPONENT_THEN_SIGN.match(self.sql, self._start)
        if m is not None:
            self._advance(m.end() - self._current)
            self._add(TokenType.NUMBER)
            return
        super()._scan_number()


_EXPONENT_THEN_SIGN: Final = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][+-]?[0-9]+(?=[+-])")


def _named(cls: type[exp.Func], name: str) -> Any:
    def build(args: list[Any]) -> exp.Expr:
        node = cls.from_arg_list(args)
        node.meta["name"] = name
        return node

    return build


def _every(args: list[Any]) -> exp.Expr:
    """`every(x)`, PostgreSQL's SQL-standard spelling of `bool_and(x)` (a column named
    "every"); another number of arguments is an unknown function (42883), as in PostgreSQL."""
    if len(args) != 1:
        return exp.Anonymous(this="every", expressions=args)
    node: exp.Expr = _named(exp.LogicalAnd, "every")(args)
    return node


_TRIMS: Final = ("BTRIM", "LTRIM", "RTRIM")


def _trim_builder(name: str) -> Any:
    """sqlglot's `btrim`/`ltrim`/`rtrim(s [, chars])`; another number of arguments is an
    unknown function (42883), as in PostgreSQL (sqlglot dropped a third argument of ltrim
    and took btrim's for a position)."""
    build = Postgres.Parser.FUNCTIONS[name]

    def checked(args: list[Any]) -> exp.Expr:
        if not 1 <= len(args) <= 2:
            return exp.Anonymous(this=name.lower(), expressions=args)
        node: exp.Expr = build(args)
        return node

    return checked


class Twofold(Postgres):
    """PostgreSQL as sqlglot reads it, plus Materialize's statements (module docstring)."""

    class Tokenizer(Postgres.Tokenizer):
        COMMANDS = Postgres.Tokenizer.COMMANDS - {TokenType.SHOW}
        KEYWORDS = {k: v for k, v in Postgres.Tokenizer.KEYWORDS.items() if k != "EXPLAIN"}

        def _init_core(self) -> Any:
            core = super()._init_core()
            core.__class__ = _Core  # `$1,$2`: sqlglot read `1,` as a dollar-quote tag
            return core

    class Parser(Postgres.Parser):  # type: ignore[misc, valid-type]
        # sqlglot reads var_samp as variance: keep the name the user wrote (a result column
        # is named after it).
        # every(x) is PostgreSQL's SQL-standard spelling of bool_and(x), named "every".
        FUNCTIONS = {**Postgres.Parser.FUNCTIONS, "VAR_SAMP": _named(exp.Variance, "var_samp"),
                     "EVERY": _every, **{name: _trim_builder(name) for name in _TRIMS}}
        # A dollar-quoted string (`$$it's$$`, `$tag$...$tag$`) is a string literal, as in
        # PostgreSQL (sqlglot makes it a RawString, which nothing binds).
        # An escape string (`E'a\tb'`) is a string literal decoded by PostgreSQL's rules from
        # its source text (sqlglot makes it a ByteString, which nothing binds).
        STRING_PARSERS = {**Postgres.Parser.STRING_PARSERS, TokenType.HEREDOC_STRING:
                          lambda self, token: self.expression(
                              exp.Literal(this=token.text, is_string=True), token),
                          TokenType.BYTE_STRING: lambda self, token: self.expression(
                              exp.Literal(this=escapestring.decode(
                                  self.sql[token.start:token.end + 1]), is_string=True),
                              token)}
        PRIMARY_PARSERS = {**Postgres.Parser.PRIMARY_PARSERS,
                           TokenType.HEREDOC_STRING: STRING_PARSERS[TokenType.HEREDOC_STRING],
                           TokenType.BYTE_STRING: STRING_PARSERS[TokenType.BYTE_STRING]}

        def _parse_statement(self) -> Any:
            if not self._curr:
                return None
            word = self._curr.text.upper()
            if word == "SUBSCRIBE" and self._curr.token_type == TokenType.VAR:
                self._advance()
                return self._parse_subscribe()
            if word == "EXPLAIN":
                self._advance()
                self._match_text_seq("PLAN", "FOR")
                return self.expression(Explain(this=self._parse_as_of(super()._parse_statement())))
            if self._curr.token_type == TokenType.SHOW:
                self._advance()
                return self._parse_show()
            if self._curr.token_type == TokenType.CREATE and self._index_statement():
                return self._parse_create_index()
            return self._parse_as_of(super()._parse_statement())

        # -- AS OF -----------------------------------------------------------------------------

        def _at_as_of(self) -> Any:
            return bool(self._curr and self._curr.token_type == TokenType.ALIAS and self._next
                        and self._next.text.upper() == "OF")

        def _parse_alias(self, this: exp.Expr | None, explicit: bool = False) -> Any:
            if self._at_as_of():
                return this
            return super()._parse_alias(this, explicit)

        def _parse_table_alias(self, alias_tokens: Any = None) -> Any:
            if self._at_as_of():
                return None
            return super()._parse_table_alias(alias_tokens)

        def _parse_as_of(self, stmt: exp.Expr | None) -> Any:
            if stmt is not None and self._at_as_of():
                self._advance(2)
                return self.expression(AsOf(this=stmt, expression=self._parse_bitwise()))
            return stmt

        # -- SUBSCRIBE -------------------------------------------------------------------------

        def _parse_subscribe(self) -> Any:
            self._match_text_seq("TO")
            target: exp.Expr | None
            if self._match(TokenType.L_PAREN):
                target = self._parse_select()
                self._match_r_paren()
            else:
                target = self._parse_table_parts()
            if target is None:
                self.raise_error("SUBSCRIBE needs an object name or a (query)")
            node = Subscribe(this=target)
            if self._match(TokenType.WITH):
                self._match_l_paren()
                while True:
                    name = (self._curr.text.upper() if self._curr else "")
                    if name not in ("SNAPSHOT", "PROGRESS"):
                        self.raise_error("SUBSCRIBE options are SNAPSHOT and PROGRESS")
                    self._advance()
                    value: exp.Expr = exp.true()
                    if self._match(TokenType.EQ):
                        value = self._parse_primary() or exp.true()
                    node.set(name.lower(), value)
                    if not self._match(TokenType.COMMA):
                        break
                self._match_r_paren()
            while self._curr:
                if self._match_text_seq("AS", "OF"):
                    node.set("as_of", self._parse_bitwise())
                elif self._match_text_seq("UP", "TO"):
                    node.set("up_to", self._parse_bitwise())
                else:
                    break
            return self.expression(node)

        # -- CREATE [DEFAULT] INDEX ------------------------------------------------------------

        def _index_statement(self) -> Any:
            i = self._index + 1
            toks = self._tokens
            if i < len(toks) and toks[i].token_type == TokenType.DEFAULT:
                return True
            return i < len(toks) and toks[i].token_type == TokenType.INDEX

        def _parse_create_index(self) -> Any:
            self._advance()  # CREATE
            default = self._match(TokenType.DEFAULT)
            self._match(TokenType.INDEX)
            exists = self._match_text_seq("IF", "NOT", "EXISTS")
            name = None
            if not (self._curr and self._curr.token_type == TokenType.ON):
                name = self._parse_id_var(any_token=False)
            if not self._match(TokenType.ON):
                self.raise_error("expected ON after CREATE INDEX [name]")
            ident = self._parse_id_var(any_token=False)
            if ident is None:
                self.raise_error("expected the name of the object to index")
            table = exp.Table(this=ident)
            exprs: list[exp.Expr] = []
            if self._match(TokenType.L_PAREN):
                exprs = self._parse_csv(self._parse_assignment)
                self._match_r_paren()
            elif not default:
                self.raise_error("CREATE INDEX needs (column, ...) unless it is DEFAULT")
            return self.expression(CreateIndex(this=name, table=table, expressions=exprs,
                                               default=bool(default), exists=bool(exists)))

        # -- SHOW --------------------------------------------------------------------------------

        def _parse_show(self) -> Any:
            for kind in _SHOW_KINDS:
                if self._match_text_seq(*kind.split()):
                    node = Show(this=kind)
                    if kind == "CREATE":
                        for k in ("MATERIALIZED VIEW", "TABLE", "VIEW", "INDEX"):
                            if self._match_text_seq(*k.split()):
                                node.set("kind", k)
                                break
                        node.set("table", self._parse_table_parts())
                    elif self._match_set((TokenType.ON, TokenType.FROM, TokenType.IN)):
                        node.set("table", self._parse_table_parts())
                    return self.expression(node)
            var = self._parse_var(any_token=True)
            if var is None:
                self.raise_error("SHOW needs what to show")
            return self.expression(Show(this=var.name.upper()))


_DIALECT = Twofold()


_PARSED: collections.OrderedDict[str, exp.Expr] = collections.OrderedDict()
_PARSED_SIZE = 512
_PARSED_LOCK = threading.Lock()


_HANDED: collections.OrderedDict[str, exp.Expr] = collections.OrderedDict()
_HANDED_SIZE = 16
OFF_LOOP_CHARS = 4096
"""Texts at least this long are parsed on a worker thread by `parse_off_loop`."""


async def parse_off_loop(text: str) -> None:
    """Parse `text` on a worker thread, so that the next `parse(text)` (on the event loop)
    takes the tree it made instead of parsing, or copying a kept tree: a long statement
    (a 20k-row INSERT's VALUES parse in ~1 s, a copy of their tree takes ~0.9 s) holds up
    the loop's other work (other sessions' reads) only in the interpreter's switch
    interval, never for the whole parse. Short texts, and a text that does not parse (its
    error is `parse`'s, on the loop), are left to `parse`."""
    if not isinstance(text, str) or len(text) < OFF_LOOP_CHARS:
        return
    try:
        # A tree of its own, neither kept nor copied (a copy costs a tenth to a half of the
        # parse itself for a tree this size): such a text is seldom sent twice.
        tree = await asyncio.to_thread(_parse, text)
    except Exception:
        return
    with _PARSED_LOCK:
        _HANDED[text] = tree
        if len(_HANDED) > _HANDED_SIZE:
            _HANDED.popitem(last=False)


def parse(text: str) -> exp.Expr:
    """The one statement in `text` (a trailing `;` allowed), or `SqlSyntaxError`. The trees
    of the latest `_PARSED_SIZE` texts parsed are kept: a text seen again costs a copy of its
    tree (a tenth of a parse), never a shared tree — unless `parse_off_loop` made one for it
    (a tree no one else holds: taken as it is)."""
    if not isinstance(text, str):
        raise SqlSyntaxError(f"a SQL statement must be a str, got {type(text).__name__}")
    with _PARSED_LOCK:
        handed = _HANDED.pop(text, None)
        if handed is not None:
            return handed
        tree = _PARSED.get(text)
        if tree is not None:
            _PARSED.move_to_end(text)
    if tree is None:
        tree = _parse(text)
        with _PARSED_LOCK:
            _PARSED[text] = tree
            if len(_PARSED) > _PARSED_SIZE:
                _PARSED.popitem(last=False)
    return tree.copy()


def _parse(text: str) -> exp.Expr:
    try:
        trees = _DIALECT.parser(error_level=ErrorLevel.RAISE).parse(_DIALECT.tokenize(text), text)
    except ParseError as e:
        err = e.errors[0] if e.errors else {}
        desc = str(err.get("description") or e).split("\n")[0]
        raise SqlSyntaxError(f"syntax error: {desc}", text, int(err.get("line") or 0),
                             int(err.get("col") or 0)) from None
    except TokenError as e:
        raise SqlSyntaxError(f"syntax error: {e}") from None
    except (ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        # sqlglot occasionally fails inside a construct instead of reporting it.
        raise SqlSyntaxError(f"syntax error: cannot parse the statement ({e})") from None
    stmts = [t for t in trees if t is not None]
    if not stmts:
        raise SqlSyntaxError("syntax error: empty statement")
    if len(stmts) > 1:
        raise FeatureNotSupported("several statements in one call are not supported; "
                                  "send one statement at a time")
    stmt = stmts[0]
    if isinstance(stmt, exp.Command):
        raise FeatureNotSupported(f"{stmt.name.upper() or 'this'} statements are not supported")
    # PostgreSQL folds unquoted identifiers to lower case; quoted ones keep theirs.
    return normalize_identifiers(stmt, dialect="postgres")


__all__ = ["AsOf", "CreateIndex", "Explain", "Show", "Subscribe", "Twofold", "parse",
           "sqlglot"]
