"""Every CLI mistake is one clear line on stderr and a non-zero exit, never a traceback
(issue 12); `--version`; `bench --help` lists the benchmarks it discovers; an interrupted demo
says so and exits 130."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import twofold
from twofold.cli import main
from twofold.cli.bench import bench_dir, discover
from twofold.testing.helpers import child_process


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), out, err


def one_error_line(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{command}: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["--listen", "127.0.0.1:99999"], 2, "port 99999 is out of range"),
        (["--listen", "nonsense"], 2, "expected HOST:PORT"),
        (["--token-file", "/nonexistent/token"], 1, "cannot read --token-file"),
        (["--storage", "sqlit:///x.db"], 1, "unsupported storage URL 'sqlit:///x.db'"),
        (["--storage", "ftp://example.com/x"], 1, "unsupported storage URL 'ftp://"),
        (["--storage", "sqlite://host/x.db"], 1, "names a local file"),
        (["--runtimes", "three"], 2, "'one' or 'two'"),
        (["--log-level", "LOUD"], 2, "unknown level 'LOUD'"),
        (["--tls-cert", "/nonexistent.pem"], 2, "go together"),
        (["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"], 1,
         "cannot load --tls-cert"),
        (["--bogus"], 2, "No such option: --bogus"),
    ],
)
def test_replica_mistakes_are_one_line_and_a_non_zero_exit(
    capsys: pytest.CaptureFixture[str], argv: list[str], code: int, says: str
) -> None:
    got, _, err = run(capsys, "replica", *argv)
    assert got == code
    assert says in one_error_line(err, "twofold replica")


def test_a_multi_line_cause_is_still_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    got, _, err = run(capsys, "replica", "--storage", f"sqlite:///{tmp_path}/missing/dir/x.db")
    assert got == 1 and "does not exist" in one_error_line(err, "twofold replica")


def test_an_empty_token_file_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "token").write_text("  \n")
    got, _, err = run(capsys, "replica", "--token-file", str(tmp_path / "token"))
    assert got == 1 and "is empty" in one_error_line(err, "twofold replica")


def test_a_port_in_use_is_one_line(capsys: pytest.CaptureFixture[str], busy_port: int) -> None:
    got, _, err = run(capsys, "replica", "--listen", f"127.0.0.1:{busy_port}",
                      "--storage", "memory://cli-busy", "--log-level", "INFO")  # fmt: skip
    assert got == 1
    line = one_error_line(err, "twofold replica")
    assert f"cannot listen on 127.0.0.1:{busy_port}" in line and "in use" in line


def test_an_unknown_command_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    got, _, err = run(capsys, "frobnicate")
    assert got == 2 and "No such command" in one_error_line(err, "twofold")


def test_no_arguments_prints_the_help_and_no_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, out, err = run(capsys)
    assert "Usage: twofold" in out + err and "error" not in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    got, out, _ = run(capsys, "--version")
    assert got == 0 and out.strip() == f"twofold {twofold.__version__}"


def test_the_program_itself_prints_no_traceback() -> None:
    argv = [sys.executable, "-m", "twofold.cli", "replica", "--storage", "sqlit:///x.db"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]


# -- bench ----------------------------------------------------------------------------------


def test_benchmarks_are_discovered_and_helpers_are_not(tmp_path: Path) -> None:
    (tmp_path / "fast.py").write_text('"""Benchmark: how fast. More."""\n\n'
                                      'if __name__ == "__main__":\n    pass\n')  # fmt: skip
    (tmp_path / "helper.py").write_text('"""A helper the benchmarks import."""\n')
    (tmp_path / "_private.py").write_text('if __name__ == "__main__":\n    pass\n')
    assert discover(tmp_path) == {"fast": "How fast."}


def test_bench_help_lists_every_benchmark_of_the_checkout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = discover()
    if not found:
        pytest.skip(f"no bench/ scripts next to this checkout ({bench_dir()})")
    assert {"engine", "writes"} <= set(found)  # two that exist today
    assert not {"bars", "replica_diag", "_plotting"} & set(found)  # helpers, not benchmarks
    got, out, _ = run(capsys, "bench", "--help")
    assert got == 0
    for name in found:
        assert name in out
    got, out, _ = run(capsys, "bench")  # no name: the list
    assert got == 0 and [line.split()[0] for line in out.splitlines()] == list(found)


def test_an_unknown_benchmark_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    got, _, err = run(capsys, "bench", "no-such-bench")
    line = one_error_line(err, "twofold bench")
    assert got == 2 and "no benchmark 'no-such-bench'" in line
    for name in discover():
        assert name in line


# -- demo -----------------------------------------------------------------------------------


def test_an_interrupted_demo_says_so_and_exits_130() -> None:
    with child_process([sys.executable, "-m", "twofold.cli", "demo", "--duration", "120",
                        "--customers", "50", "--no-live"]) as child:
        line = child.stdout.readline()
        assert "phase runtimes=one" in line, line
        time.sleep(1.0)
        child.proc.send_signal(signal.SIGINT)
        out = child.stdout.read()
        child.proc.wait(timeout=60)
    err = child.err
    assert child.proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == (
        "twofold demo: interrupted before both phases finished: no summary")
    assert "Traceback" not in err
    assert "Summary" not in out
