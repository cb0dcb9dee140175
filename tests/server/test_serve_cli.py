"""`twofold serve`: the start line says where to connect, psql-compatible clients work, SIGTERM
stops it cleanly; trust on a non-loopback address must be asked for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

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
