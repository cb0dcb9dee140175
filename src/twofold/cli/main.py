"""`twofold` commands: `replica` (serve a compute replica over TCP), `demo`, `bench`.

Contract: every mistake on the command line — a bad option value, a port out of range or in
use, an unreadable token file, a malformed storage URL — is **one line** on stderr
(`twofold <command>: error: ...`) and a non-zero exit (2 for usage, 1 otherwise); an interrupt
is `... interrupted` and exit 130. Never a traceback: `main()` is the only entry point and
turns every error into that line (`TWOFOLD_DEBUG=1` shows the traceback of an unexpected one).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer

import twofold
from twofold.cli.bench import bench_dir, discover, listing

app = typer.Typer(
    name="twofold",
    help="A compute replica split into a maintenance and an interactive runtime.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


class CliError(Exception):
    """A mistake the user can fix: printed as one line, exit status `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _version(value: bool) -> None:
    if value:
        print(f"twofold {twofold.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.",
                                          callback=_version, is_eager=True)] = False,
) -> None:
    """A compute replica split into a maintenance and an interactive runtime."""


def _bench_help() -> str:
    found = discover()
    lines = "\n".join(f"* **{n}** — {s}" if s else f"* **{n}**" for n, s in found.items())
    return ("Run a benchmark from bench/ (prints absolute figures and side-by-side ratios).\n\n"
            "Benchmarks (the scripts in bench/):\n\n" + (lines or "* none found"))


@app.command(help=_bench_help())
def bench(
    name: Annotated[str | None, typer.Argument(help="Benchmark name: a script bench/NAME.py "
                                               "(none: list them).")] = None,
    quick: Annotated[bool, typer.Option(help="A short smoke run.")] = False,
) -> None:
    import subprocess

    found = discover()
    if name is None:
        print(listing(found))
        return
    if name not in found:
        known = ", ".join(found) or "none (bench/ is part of a source checkout)"
        raise CliError(f"no benchmark {name!r}; available: {known}", 2)
    script = bench_dir() / f"{name}.py"
    raise typer.Exit(subprocess.call([sys.executable, str(script),
                                      *(["--quick"] if quick else [])]))  # fmt: skip


def _parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise typer.BadParameter(f"expected HOST:PORT, got {listen!r}", param_hint="--listen")
    if not 0 <= int(port) <= 65535:
        raise typer.BadParameter(f"port {port} is out of range (0-65535; 0 picks a free one)",
                                 param_hint="--listen")  # fmt: skip
    return (host or "127.0.0.1").strip("[]"), int(port)


def _read_token(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise CliError(f"cannot read --token-file {str(path)!r}: {reason}") from None
    if not token:
        raise CliError(f"--token-file {str(path)!r} is empty; put the shared token in it")
    return token


def _tls_context(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    if (cert is None) != (key is None):
        raise typer.BadParameter("--tls-cert and --tls-key go together")
    if cert is None or key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise CliError(f"cannot load --tls-cert {str(cert)!r} / --tls-key {str(key)!r}: "
                       f"{reason}") from None  # fmt: skip
    return context


@app.command()
def replica(
    listen: Annotated[str, typer.Option(help="Address to listen on (port 0 picks a free one).")]
    = "127.0.0.1:0",
    storage: Annotated[str, typer.Option(help="Storage URL: sqlite:///path.db, memory://name, or "
                                  "postgres://user@host:port/db?blob=file:///dir|s3://bucket/prefix.")]
    = "sqlite:///twofold.db",
    runtimes: Annotated[str, typer.Option(help="'two' (maintenance + interactive) or 'one'.")]
    = "two",
    placement: Annotated[str, typer.Option(
        help="Where two runtimes run: 'processes' (maintenance in a child process), 'threads', "
             "or 'auto' (processes unless the storage is memory://).")] = "auto",
    token_file: Annotated[Path | None, typer.Option(help="File holding the shared token.")]
    = None,
    tls_cert: Annotated[Path | None, typer.Option(help="TLS certificate (PEM).")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="TLS private key (PEM).")] = None,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "INFO",
) -> None:
    """Serve a compute replica to one controller connection at a time."""
    from twofold.replica import serve_replica
    from twofold.storage import StorageError

    level = logging.getLevelName(log_level.upper())
    if not isinstance(level, int):
        raise typer.BadParameter(f"unknown level {log_level!r} (DEBUG, INFO, WARNING, ERROR)",
                                 param_hint="--log-level")  # fmt: skip
    if runtimes not in ("one", "two"):
        raise typer.BadParameter("must be 'one' or 'two'", param_hint="--runtimes")
    if placement not in ("auto", "threads", "processes"):
        raise typer.BadParameter("must be 'auto', 'threads' or 'processes'",
                                 param_hint="--placement")
    if placement == "processes" and runtimes == "two" and storage.startswith("memory:"):
        raise typer.BadParameter("a maintenance process cannot open memory:// storage; use a "
                                 "SQLite file or --placement threads", param_hint="--placement")
    host, port = _parse_listen(listen)
    token = _read_token(token_file) if token_file is not None else None
    context = _tls_context(tls_cert, tls_key)
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def run() -> int:
        ready: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(serve_replica(
            storage, host=host, port=port, runtimes=runtimes,  # type: ignore[arg-type]
            token=token, ssl=context, ready=ready,
            placement=placement))  # type: ignore[arg-type]
        waiters: set[asyncio.Future[Any]] = {task, ready}
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if ready in done:
            addr = ready.result()
            # The one line scripts wait for: where to connect.
            print(f"listening on {addr[0]}:{addr[1]}", flush=True)
        return await task

    try:
        code = asyncio.run(run())
    except KeyboardInterrupt:
        code = 0  # Ctrl-C is how a replica in a terminal is stopped
    except StorageError as e:
        raise CliError(f"--storage: {e}") from None
    except OSError as e:  # binding: in use, not an address of this machine, no permission
        reason = e.strerror or str(e)
        raise CliError(f"cannot listen on {host}:{port}: {reason}") from None
    raise typer.Exit(code)


@app.command()
def serve(
    listen: Annotated[str, typer.Option(help="Address to listen on (port 0 picks a free one).")]
    = "127.0.0.1:6875",
    storage: Annotated[str | None, typer.Option(
        help="Storage URL (default: a scratch SQLite file, embedded replica).")] = None,
    replicas: Annotated[str | None, typer.Option(
        help="Remote replicas HOST:PORT,... (default: one embedded replica).")] = None,
    token_file: Annotated[Path | None, typer.Option(help="File holding the replicas' token.")]
    = None,
    password_file: Annotated[Path | None, typer.Option(
        help="File of user:password lines (enables SCRAM-SHA-256).")] = None,
    auth: Annotated[str | None, typer.Option(
        help="trust, password, md5 or scram-sha-256 (default: trust on loopback).")] = None,
    tls_cert: Annotated[Path | None, typer.Option(help="TLS certificate (PEM).")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="TLS private key (PEM).")] = None,
) -> None:
    """Serve the PostgreSQL wire protocol: psql, psycopg, asyncpg, SQLAlchemy... connect here."""
    from twofold.server.auth import load_passwords
    from twofold.server.serve import resolve_auth
    from twofold.server.serve import serve as run_server

    host, port = _parse_listen(listen)
    token = _read_token(token_file) if token_file is not None else None
    context = _tls_context(tls_cert, tls_key)
    passwords = None
    if password_file is not None:
        try:
            passwords = load_passwords(password_file)
        except (OSError, ValueError) as e:
            raise CliError(f"cannot read --password-file {str(password_file)!r}: {e}") from None
    try:
        method = resolve_auth(auth, passwords, host)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--auth") from None

    # the line names a user who can log in: under a password file, one of its users
    user = "twofold" if not passwords or "twofold" in passwords else next(iter(passwords))

    def ready(h: str, p: int) -> None:
        print(f"twofold serve: listening on {h}:{p} (auth {method}); connect with: "
              f"psql -h {h} -p {p} -U {user} twofold", flush=True)

    try:
        asyncio.run(run_server(host, port, storage=storage,
                               replicas=replicas.split(",") if replicas else None,
                               token=token, auth=method, passwords=passwords, tls=context,
                               ready=ready))
    except KeyboardInterrupt:
        pass
    except OSError as e:
        raise CliError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


@app.command()
def demo(
    duration: Annotated[float, typer.Option(help="Total seconds (split over both phases).")]
    = 30.0,
    customers: Annotated[int, typer.Option(help="Number of customers.")] = 1000,
    seed: Annotated[int, typer.Option(help="Random seed of the workload.")] = 0,
    live: Annotated[bool | None, typer.Option(help="Live view (default: on a terminal).")]
    = None,
) -> None:
    """Run a live orders workload on the embedded default, once with one runtime and once
    with two, and compare point-lookup latency."""
    from rich.console import Console as StdoutConsole

    from twofold.cli.demo import ratio_line, run_demo, summary_table

    if duration <= 0 or customers <= 0:
        raise typer.BadParameter("--duration and --customers must be positive")
    out = StdoutConsole()
    if not out.is_terminal:
        out = StdoutConsole(width=120)  # a log or a pipe: room for the summary's columns
    try:
        report = asyncio.run(run_demo(duration, customers=customers, seed=seed, console=out,
                                      live=out.is_terminal if live is None else live))
    except KeyboardInterrupt:
        raise CliError("interrupted before both phases finished: no summary", 130) from None
    out.print(summary_table(report))
    out.print(ratio_line(report))


def _fail(command: str, message: str, code: int) -> None:
    message = " ".join(message.split())  # one line, whatever a lower layer's message held
    if not message:  # `twofold` alone: the help was the answer
        sys.exit(code)
    print(f"{command}: error: {message}" if code != 130 else f"{command}: {message}",
          file=sys.stderr, flush=True)  # fmt: skip
    sys.exit(code)


def _command(argv: list[str]) -> str:
    """`twofold` or `twofold <command>`, for the error line."""
    names = {c.name or (c.callback.__name__ if c.callback else "") for c in
             app.registered_commands}  # fmt: skip
    sub = next((a for a in argv if not a.startswith("-")), None)
    return f"twofold {sub}" if sub in names else "twofold"


def main(argv: list[str] | None = None) -> None:
    """The `twofold` program: runs the command, turns every error into one line (see the
    module docstring) and exits with the command's status."""
    args = sys.argv[1:] if argv is None else list(argv)
    command = _command(args)
    try:
        code = app(args=args, prog_name="twofold", standalone_mode=False)
    except CliError as e:
        _fail(command, str(e), e.code)
    except typer.TyperException as e:  # usage errors: bad option values, unknown options
        format_message = getattr(e, "format_message", None)
        message = format_message() if callable(format_message) else str(e)
        _fail(command, message, int(getattr(e, "exit_code", 2)))
    except typer.Abort:
        _fail(command, "interrupted", 130)
    except KeyboardInterrupt:
        _fail(command, "interrupted", 130)
    except Exception as e:  # a bug, not a mistake: still one line unless asked for more
        if os.environ.get("TWOFOLD_DEBUG"):
            traceback.print_exc()
        _fail(command, f"unexpected {type(e).__name__}: {e} (TWOFOLD_DEBUG=1 shows where)", 1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # `python -m twofold.cli.main ...` too (not only `-m twofold.cli`)
    main()
