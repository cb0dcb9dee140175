"""Run `async def` tests on a fresh event loop (no pytest-asyncio dependency)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        names = pyfuncitem._fixtureinfo.argnames
        kwargs: dict[str, Any] = {n: pyfuncitem.funcargs[n] for n in names}
        asyncio.run(asyncio.wait_for(pyfuncitem.obj(**kwargs), timeout=60))
        return True
    return None
