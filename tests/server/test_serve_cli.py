"""`twofold serve`: the start line says where to connect, psql-compatible clients work, SIGTERM
stops it cleanly; trust on a non-loopback address must be asked for; `--replicas` with
`--token-file` runs the dataflows on a `twofold replica` in another process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg

from twofold.testing.pgcluster import free_port


def test_serve_starts_answers_and_stops_on_sigterm() -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "twofold.cli", "serve", "--listen",
                             f"127.0.0.1:{port}", "--storage", "memory://"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"listening on 127.0.0.1:{port}" in line, line
        assert f"psql -h 127.0.0.1 -p {port} -U twofold twofold" in line
        with psycopg.connect(f"host=127.0.0.1 port={port} user=twofold dbname=twofold",
                             autocommit=True) as c:
            c.execute("CREATE TABLE t (k bigint)")
            c.execute("INSERT INTO t VALUES (1)")
            assert c.execute("SELECT k FROM t").fetchall() == [(1,)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_refuses_trust_off_loopback() -> None:
    done = subprocess.run([sys.executable, "-m", "twofold.cli", "serve", "--listen", "0.0.0.0:0"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TWOFOLD_DEBUG": ""})
    assert done.returncode == 2
    assert "refusing passwordless (trust)" in done.stderr
    assert "Traceback" not in done.stderr


def _started(argv: list[str], what: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"{what} did not start: {line!r} {err[-2000:]}")
    return proc, line


def _stop(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_serve_over_a_remote_replica_with_a_token(tmp_path: Path) -> None:
    """`--replicas HOST:PORT --token-file F`: the server's dataflows run on a `twofold replica`
    in another process, over the same SQLite storage, authenticated by the shared token."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    rport, sport = free_port(), free_port()
    replica, _ = _started([sys.executable, "-m", "twofold.cli", "replica", "--listen",
                           f"127.0.0.1:{rport}", "--storage", url, "--runtimes", "one",
                           "--token-file", str(token)], "twofold replica")
    server = None
    try:
        bad = tmp_path / "bad-token"
        bad.write_text("not-the-token\n")
        refused = subprocess.run([sys.executable, "-m", "twofold.cli", "serve", "--listen",
                                  f"127.0.0.1:{sport}", "--storage", url, "--replicas",
                                  f"127.0.0.1:{rport}", "--token-file", str(bad)],
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0 and "wrong token" in refused.stderr + refused.stdout
        server, line = _started([sys.executable, "-m", "twofold.cli", "serve", "--listen",
                                 f"127.0.0.1:{sport}", "--storage", url, "--replicas",
                                 f"127.0.0.1:{rport}", "--token-file", str(token)],
                                "twofold serve")
        assert f"127.0.0.1:{sport}" in line
        with psycopg.connect(f"host=127.0.0.1 port={sport} user=twofold dbname=twofold",
                             autocommit=True, connect_timeout=30) as c:
            c.execute("CREATE TABLE t (k bigint, v text)")
            c.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
            c.execute("CREATE INDEX t_k ON t (k)")  # maintained on the remote replica
            assert c.execute("SELECT v FROM t WHERE k = 2").fetchall() == [("b",)]
            assert c.execute("SELECT count(*) FROM t").fetchone() == (2,)
    finally:
        _stop(*(p for p in (server, replica) if p is not None))


def test_serve_as_the_main_module() -> None:
    """`python -m twofold.cli.main serve` starts the server as `python -m twofold.cli serve`
    does (it exited at once, silently, status 0)."""
    port = free_port()
    proc, line = _started([sys.executable, "-W", "ignore::RuntimeWarning", "-m",
                           "twofold.cli.main", "serve", "--listen", f"127.0.0.1:{port}",
                           "--storage", "memory://"], "twofold serve")
    try:
        assert f"listening on 127.0.0.1:{port}" in line, line
        with psycopg.connect(f"host=127.0.0.1 port={port} user=twofold dbname=twofold",
                             autocommit=True, connect_timeout=10) as c:
            assert c.execute("SELECT 1").fetchone() == (1,)
    finally:
        _stop(proc)
