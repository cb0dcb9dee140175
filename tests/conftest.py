"""Suite-wide pytest configuration.

- **Hypothesis profiles** (`twofold.testing.profiles`): `dev` by default, `ci` under `CI=true`,
  `deep` with `TWOFOLD_HYPOTHESIS=deep`. Tests scale their budgets with
  `max_examples=examples(n)`; the per-test timeout scales with the profile's factor too, so a
  deeper run is not cut short by a bound sized for `dev`.
- **`async def` tests** run on a fresh event loop, bounded by `ASYNC_TEST_TIMEOUT` (no
  pytest-asyncio dependency): one hook for every test directory.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from twofold.testing.profiles import factor, load_profile

# Throwaway PostgreSQL/S3 servers for the storage backends (`servers` fixture, skip summary);
# `pytester` for the tests of that plugin's summary.
pytest_plugins = ["twofold.testing.pytest_servers", "pytester"]

PROFILE = load_profile()

ASYNC_TEST_TIMEOUT = 60.0
"""A bound on each `async def` test, so a hang fails instead of stalling the suite."""


def pytest_report_header() -> str:
    return f"hypothesis profile: {PROFILE} (examples x{factor()})"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    scale = factor()
    if scale == 1:
        return
    base = float(config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        seconds = float(marker.args[0]) if marker is not None and marker.args else base
        if seconds > 0:
            item.add_marker(pytest.mark.timeout(seconds * scale), append=False)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        names = pyfuncitem._fixtureinfo.argnames
        kwargs: dict[str, Any] = {n: pyfuncitem.funcargs[n] for n in names}
        asyncio.run(asyncio.wait_for(pyfuncitem.obj(**kwargs), timeout=ASYNC_TEST_TIMEOUT))
        return True
    return None
