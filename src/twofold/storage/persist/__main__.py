"""`python -m twofold.storage.persist gc URL [--grace SECONDS]`: collect garbage once.

Truncates old versions of every shard, deletes the blobs only they referenced, and deletes
blobs no version references that are older than the grace period (parts of writers that died
between PUT and compare-and-set). Prints what it deleted as JSON. Safe to run from any machine
while others read and write; run it periodically (a cron job on one machine is enough).
"""

from __future__ import annotations

import argparse
import json
import sys

from twofold.storage import StorageError, open_storage
from twofold.storage.persist.backend import PersistBackend


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m twofold.storage.persist",
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gc = sub.add_parser("gc", help="collect garbage once")
    gc.add_argument("url", help="postgres://user@host:port/db?blob=...")
    gc.add_argument("--grace", type=float, default=3600.0,
                    help="seconds an unreferenced blob must have existed to be deleted")
    args = parser.parse_args(argv)
    try:
        with open_storage(args.url) as storage:
            if not isinstance(storage.backend, PersistBackend):
                print(f"error: {args.url!r} is not a postgres:// storage URL", file=sys.stderr)
                return 2
            print(json.dumps(storage.backend.collect_garbage(grace_seconds=args.grace)))
    except StorageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
