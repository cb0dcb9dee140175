"""PostgreSQL's boolean input (`boolin`): the text a `boolean` accepts.

Contract: `parse_bool(text)` is True, False, or None when `text` is not a boolean (the caller
raises its own `22P02`). Accepted, case-insensitively, with leading and trailing whitespace
(space, tab, newline, carriage return, vertical tab, form feed) ignored: any prefix of `true`,
`false`, `yes` or `no` (so `t`, `tr`, `y`, `n` ...), `on`, `of`/`off`, `1` and `0` — exactly
PostgreSQL's `parse_bool_with_len` (`o` alone is ambiguous and refused). `TRUE_WORDS` and
`FALSE_WORDS` list every spelling, lower-case (for vectorised membership tests).
"""

from __future__ import annotations

from typing import Final


def _prefixes(word: str, shortest: int = 1) -> list[str]:
    return [word[:n] for n in range(shortest, len(word) + 1)]


TRUE_WORDS: Final = frozenset([*_prefixes("true"), *_prefixes("yes"), "on", "1"])
FALSE_WORDS: Final = frozenset([*_prefixes("false"), *_prefixes("no"), "of", "off", "0"])
_SPACE: Final = " \t\n\r\v\f"


def parse_bool(text: str) -> bool | None:
    t = text.strip(_SPACE).lower()
    if t in TRUE_WORDS:
        return True
    if t in FALSE_WORDS:
        return False
    return None
