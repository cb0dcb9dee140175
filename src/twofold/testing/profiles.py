"""How hard the property tests search: the suite's `hypothesis` profiles and `examples(n)`.

**Test-only** (imports `hypothesis`, the `test` extra).

Contract: one mechanism governs every property test's example count. A profile scales the
whole suite by a factor; a test that costs more or less than the typical one states its budget
*relative to that factor* with `@settings(max_examples=examples(n))`, where `n` is its count
under `dev`. A bare `max_examples=<int>` in a test would pin the count and silently ignore the
profile, so the suite never writes one.

| profile | factor | selected by                                    | for                          |
|---------|--------|------------------------------------------------|------------------------------|
| `dev`   | 1      | default                                        | local `make test`            |
| `ci`    | 1      | `CI=true` (`.ci/run` sets it; CI services do)  | every push, ~10 min budget   |
| `deep`  | 25     | `TWOFOLD_HYPOTHESIS=deep`                      | long runs before a release   |

`TWOFOLD_HYPOTHESIS=<profile>` selects a profile explicitly and wins over `CI`. No profile has
a deadline: timing on a loaded machine is not a correctness signal. `ci` and `deep` print the
blob that reproduces a failure (`@reproduce_failure`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hypothesis import settings

BASE_EXAMPLES = 100
"""`max_examples` of a test that states no budget, under `dev` (hypothesis's own default)."""

FACTORS: dict[str, int] = {"dev": 1, "ci": 1, "deep": 25}

ENV_VAR = "TWOFOLD_HYPOTHESIS"


class UnknownProfile(ValueError):
    """`TWOFOLD_HYPOTHESIS` names no profile."""


def profile_name(environ: Mapping[str, str] = os.environ) -> str:
    """The profile the environment selects: `TWOFOLD_HYPOTHESIS`, else `ci` under `CI=true`
    (or `1`), else `dev`."""
    explicit = environ.get(ENV_VAR, "").strip()
    if explicit:
        if explicit not in FACTORS:
            raise UnknownProfile(
                f"{ENV_VAR}={explicit!r} names no hypothesis profile; known: {sorted(FACTORS)}"
            )
        return explicit
    if environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        return "ci"
    return "dev"


def register_profiles() -> None:
    for name, factor in FACTORS.items():
        settings.register_profile(
            name,
            deadline=None,
            max_examples=BASE_EXAMPLES * factor,
            print_blob=name != "dev",
        )


def load_profile(environ: Mapping[str, str] = os.environ) -> str:
    """Register the profiles and load the one the environment selects; returns its name."""
    register_profiles()
    name = profile_name(environ)
    settings.load_profile(name)
    return name


def factor() -> int:
    """The loaded profile's factor (1 if a profile not registered here is loaded)."""
    return max(1, settings().max_examples // BASE_EXAMPLES)


def examples(n: int) -> int:
    """The example count for a test whose budget under `dev` is `n`: `n` times the profile's
    factor. Use it as `@settings(max_examples=examples(n))`."""
    if n < 1:
        raise ValueError(f"examples(n) needs n >= 1, got {n}")
    return n * factor()
