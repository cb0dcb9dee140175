"""`twofold` commands: `replica` (serve a compute replica over TCP), and more as they land."""

from __future__ import annotations

import asyncio
import logging
import ssl
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

app = typer.Typer(
    name="twofold",
    help="A compute replica split into a maintenance and an interactive runtime.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console(stderr=True)


@app.callback()
def _root() -> None:
    """A compute replica split into a maintenance and an interactive runtime."""


def _bench_dir() -> Path:
    """`bench/` of the source checkout this package runs from (benchmarks are not installed)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "bench").is_dir() and (parent / "pyproject.toml").is_file():
            return parent / "bench"
    return Path.cwd() / "bench"


@app.command()
def bench(
    name: Annotated[str, typer.Argument(help="Benchmark name: a script bench/NAME.py.")],
    quick: Annotated[bool, typer.Option(help="A short smoke run.")] = False,
) -> None:
    """Run a benchmark from bench/ (prints absolute figures and side-by-side ratios)."""
    import subprocess

    bench_dir = _bench_dir()
    script = bench_dir / f"{name}.py"
    if not script.is_file():
        known = sorted(p.stem for p in bench_dir.glob("*.py") if not p.stem.startswith("_"))
        console.print(f"[red]no benchmark {name!r}[/red]; available: {', '.join(known) or 'none'}")
        raise typer.Exit(2)
    args = [sys.executable, str(script), *(["--quick"] if quick else [])]
    raise typer.Exit(subprocess.call(args))


def _parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise typer.BadParameter(f"expected HOST:PORT, got {listen!r}", param_hint="--listen")
    return (host or "127.0.0.1").strip("[]"), int(port)


@app.command()
def replica(
    listen: Annotated[str, typer.Option(help="Address to listen on (port 0 picks a free one).")]
    = "127.0.0.1:0",
    storage: Annotated[str, typer.Option(help="Storage URL: sqlite:///path.db or memory://name.")]
    = "sqlite:///twofold.db",
    runtimes: Annotated[str, typer.Option(help="'two' (maintenance + interactive) or 'one'.")]
    = "two",
    token_file: Annotated[Path | None, typer.Option(help="File holding the shared token.")]
    = None,
    tls_cert: Annotated[Path | None, typer.Option(help="TLS certificate (PEM).")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="TLS private key (PEM).")] = None,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "INFO",
) -> None:
    """Serve a compute replica to one controller connection at a time."""
    from twofold.replica import serve_replica

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if runtimes not in ("one", "two"):
        raise typer.BadParameter("must be 'one' or 'two'", param_hint="--runtimes")
    host, port = _parse_listen(listen)
    token = token_file.read_text().strip() if token_file is not None else None
    context: ssl.SSLContext | None = None
    if (tls_cert is None) != (tls_key is None):
        raise typer.BadParameter("--tls-cert and --tls-key go together")
    if tls_cert is not None and tls_key is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls_cert, tls_key)

    async def run() -> int:
        ready: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(serve_replica(
            storage, host=host, port=port, runtimes=runtimes,  # type: ignore[arg-type]
            token=token, ssl=context, ready=ready))
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
        code = 0
    raise typer.Exit(code)


def main() -> None:
    app()


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
    report = asyncio.run(run_demo(duration, customers=customers, seed=seed, console=out,
                                  live=out.is_terminal if live is None else live))
    out.print(summary_table(report))
    out.print(ratio_line(report))
