"""`twofold bench`: the benchmarks of the source checkout, discovered rather than listed.

A benchmark is a script `bench/NAME.py` that runs as a program (it has an
`if __name__ == "__main__":` block) and whose name does not start with `_`; helpers such as
`bench/bars.py` are not benchmarks. Its summary is its docstring's first sentence. New scripts
appear in `twofold bench --help` without touching this module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SUMMARY_WIDTH = 90
_MAIN = re.compile(r"""^if\s+__name__\s*==\s*["']__main__["']\s*:""", re.MULTILINE)


def bench_dir() -> Path:
    """`bench/` of the source checkout this package runs from (benchmarks are not installed)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "bench").is_dir() and (parent / "pyproject.toml").is_file():
            return parent / "bench"
    return Path.cwd() / "bench"


def summary(text: str) -> str:
    """The first sentence of a module's docstring, on one line ("" without one)."""
    try:
        doc = ast.get_docstring(ast.parse(text)) or ""
    except SyntaxError:
        return ""
    first = " ".join(doc.split("\n\n", 1)[0].split())
    sentence = re.split(r"(?<=[.!?])\s", first, maxsplit=1)[0].removeprefix("Benchmark: ")
    if len(sentence) > SUMMARY_WIDTH:
        sentence = sentence[:SUMMARY_WIDTH].rsplit(" ", 1)[0].rstrip(",;:") + " ..."
    return sentence[:1].upper() + sentence[1:]


def discover(directory: Path | None = None) -> dict[str, str]:
    """`{name: summary}` of the benchmarks in `directory` (default: `bench_dir()`), by name."""
    directory = bench_dir() if directory is None else directory
    found: dict[str, str] = {}
    for path in sorted(directory.glob("*.py")) if directory.is_dir() else []:
        if path.stem.startswith("_"):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if _MAIN.search(text):
            found[path.stem] = summary(text)
    return found


def listing(benchmarks: dict[str, str]) -> str:
    """One line per benchmark, `name — summary`; a note when there are none."""
    if not benchmarks:
        return "No benchmarks found (they live in bench/ of a source checkout)."
    width = max(len(n) for n in benchmarks)
    return "\n".join(f"{n.ljust(width)}  {s}".rstrip() for n, s in benchmarks.items())
