"""The README's API example runs as written (so the front page never rots)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_a_short_api_example() -> None:
    blocks = python_blocks()
    assert blocks, "README.md has no ```python block"
    assert len(blocks[0].strip().splitlines()) <= 12


def test_readme_example_runs() -> None:
    for block in python_blocks():
        exec(compile(block, str(README), "exec"), {"__name__": "readme"})


def test_docstring_examples_run() -> None:
    import doctest

    import twofold.api.sync

    failures, tried = doctest.testmod(twofold.api.sync, raise_on_error=False)
    assert tried > 0 and failures == 0
