"""Shared pieces of the protocol strategies: the per-arguments memo, bounds, small helpers."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")
P = ParamSpec("P")
S = st.SearchStrategy


def _memo(factory: Callable[P, T]) -> Callable[P, T]:
    """Build each strategy once per distinct arguments.

    Hypothesis validates a strategy object on first draw, and for `st.builds` over msgspec
    classes that means resolving type hints; a strategy rebuilt inside every composite draw
    pays that each time (it made dataflow generation ~5x slower). Strategies are immutable,
    so sharing one object is safe. Arguments must be hashable (strategies hash by identity);
    the cache is bounded, since callers may pass a fresh strategy object on every call.
    """
    cached: Callable[..., T] = functools.lru_cache(maxsize=256)(factory)

    @functools.wraps(factory)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        return cached(*args, **kwargs)

    return wrapper


INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_COLUMN = 7
"""Column indexes are drawn from `[0, MAX_COLUMN]`: structural, not checked against arity."""

_names = st.text(min_size=1, max_size=8)


def _small_lists(elements: S[T], max_size: int = 3, *, min_size: int = 0) -> S[list[T]]:
    return st.lists(elements, min_size=min_size, max_size=max_size)


@_memo
def _columns(max_column: int = MAX_COLUMN) -> S[int]:
    return st.integers(0, max_column)
