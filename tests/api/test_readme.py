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


SERVER = "port=6875"  # blocks that talk to a running `twofold serve`


def test_readme_example_runs() -> None:
    for block in python_blocks():
        if SERVER not in block:
            exec(compile(block, str(README), "exec"), {"__name__": "readme"})


class _Received(Exception):
    pass


def test_readme_subscribe_snippet_streams_a_write() -> None:
    """The psycopg snippet, as written, against a server (on a free port instead of 6875): it
    prints the table's rows as they arrive; the test stops it at the row it inserted."""
    import threading

    import psycopg

    from twofold.testing.pgwire import running_server

    [block] = [b for b in python_blocks() if SERVER in b]
    with running_server() as server:
        dsn = f"host=127.0.0.1 port={server.port} user=twofold dbname=twofold"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (k bigint, v text)")
        seen: list[tuple[object, ...]] = []

        def print_(*row: object) -> None:
            seen.append(row)
            raise _Received

        def write() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("INSERT INTO t VALUES (7, 'seven')")

        writer = threading.Timer(0.5, write)
        writer.start()
        try:
            exec(compile(block.replace("port=6875", f"port={server.port}"), str(README), "exec"),
                 {"__name__": "readme", "print": print_})
        except _Received:
            pass
        finally:
            writer.join(30)
        assert len(seen) == 1 and seen[0][1:] == (1, 7, "seven"), seen


def test_docstring_examples_run() -> None:
    import doctest

    import twofold.api.sync

    failures, tried = doctest.testmod(twofold.api.sync, raise_on_error=False)
    assert tried > 0 and failures == 0
