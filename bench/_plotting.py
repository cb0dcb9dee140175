"""The benchmarks' plots need matplotlib, the `bench` extra (`make bench` installs it)."""

from __future__ import annotations

from typing import Any


def pyplot() -> Any | None:
    """`matplotlib.pyplot` on the file-only Agg backend, or None (with a hint printed) when
    matplotlib is not installed — the measured figures are printed either way."""
    try:
        import matplotlib
    except ImportError:
        print("no plot: matplotlib is not installed (pip install -e '.[bench]', or make bench)")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
