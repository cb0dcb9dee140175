"""twofold: a compute replica split into a maintenance and an interactive runtime behind one
protocol. The user-facing API lives in `twofold.api` and is re-exported here:

    import twofold
    with twofold.open() as db:
        ...

The re-export is lazy (PEP 562), so importing a lower layer (`twofold.protocol`, ...) does not
load the whole stack; `help(twofold)` and `from twofold import *` load the API when asked and
show or import all of it (the module's `__all__` is the API's, computed on first use). See
`README.md` and `docs/architecture.md`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from twofold.api import *  # noqa: F403


def __getattr__(name: str) -> Any:
    import twofold.api as api

    if name == "__all__":
        # Asked for by `help(twofold)` (pydoc lists exactly `__all__`'s names, documented) and
        # `from twofold import *`: the API's names, loaded on that first request only.
        return list(api.__all__)
    if name in api.__all__:
        return getattr(api, name)
    raise AttributeError(f"module 'twofold' has no attribute {name!r}")


def __dir__() -> list[str]:
    import twofold.api as api

    return sorted([*globals(), *api.__all__])
