"""The `twofold` command line (typer + rich)."""

from twofold.cli.main import app, main

__all__ = ["app", "main"]
