"""Write-once blobs for batch parts, over `obstore` (S3 or a local directory).

`file:///abs/dir` is a directory on a filesystem every process can reach (a local disk for one
machine, a shared mount for several); `s3://bucket/prefix` is an S3 bucket, configured from the
standard `AWS_*` environment variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP` for a plain-HTTP endpoint).

Keys are fresh UUIDs under a per-shard prefix, so a key is never written twice and no
conditional put is needed. A file-backed PUT is made durable before it returns (the file and
its directory are fsynced after obstore's write-and-rename), because the consensus state that
references the part is committed right after it.
"""

from __future__ import annotations

import datetime
import os
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import obstore
from obstore.store import LocalStore, S3Store

from twofold.storage.errors import InvalidStorageUrl, StorageError


class BlobMissing(StorageError):
    """A part's blob is gone (garbage-collected after compaction replaced it)."""


class BlobStore:
    """Write-once part blobs. Thread-safe."""

    def __init__(self, url: str) -> None:
        self.url = url
        parts = urlsplit(url)
        self._root: Path | None = None
        if parts.scheme == "file":
            if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
                raise InvalidStorageUrl(
                    f"blob URL {url!r}: a file blob store is file:///absolute/directory"
                )
            self._root = Path(unquote(parts.path))
            try:
                self._root.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StorageError(
                    f"blob store {url!r}: cannot create the directory: {e}"
                ) from None
            self._store: LocalStore | S3Store = LocalStore(prefix=self._root, mkdir=True)
        elif parts.scheme == "s3":
            if not parts.netloc:
                raise InvalidStorageUrl(f"blob URL {url!r}: an S3 blob store is s3://bucket/prefix")
            prefix = parts.path.strip("/") or None
            try:
                self._store = S3Store(parts.netloc, prefix=prefix,
                                      client_options=_client_options())
            except Exception as e:  # obstore raises its own config errors
                raise StorageError(f"blob store {url!r}: {e}") from None
        else:
            raise InvalidStorageUrl(
                f"blob URL {url!r}: the scheme must be 'file' (file:///dir) or 's3' "
                f"(s3://bucket/prefix)"
            )

    @staticmethod
    def shard_prefix(shard_id: str) -> str:
        return quote(shard_id, safe="")

    def new_key(self, shard_id: str) -> str:
        return f"{self.shard_prefix(shard_id)}/{uuid.uuid4().hex}.arrow"

    def put(self, key: str, data: bytes) -> None:
        try:
            obstore.put(self._store, key, data)
        except Exception as e:
            raise StorageError(f"blob store {self.url!r}: PUT {key} failed: {e}") from None
        if self._root is not None:
            path = self._root / key
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def get(self, key: str) -> memoryview:
        try:
            return memoryview(obstore.get(self._store, key).bytes())
        except FileNotFoundError:
            raise BlobMissing(f"blob store {self.url!r}: {key} is gone") from None
        except Exception as e:
            if type(e).__name__ == "NotFoundError":
                raise BlobMissing(f"blob store {self.url!r}: {key} is gone") from None
            raise StorageError(f"blob store {self.url!r}: GET {key} failed: {e}") from None

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            try:
                obstore.delete(self._store, key)
            except FileNotFoundError:
                pass
            except Exception as e:
                if type(e).__name__ != "NotFoundError":
                    raise StorageError(
                        f"blob store {self.url!r}: DELETE {key} failed: {e}"
                    ) from None

    def list(self, prefix: str | None = None) -> list[tuple[str, datetime.datetime]]:
        """Every key (under `prefix`) with its last-modified time."""
        out: list[tuple[str, datetime.datetime]] = []
        try:
            for chunk in obstore.list(self._store, prefix):
                out.extend((str(m["path"]), m["last_modified"]) for m in chunk)
        except FileNotFoundError:
            return []
        except Exception as e:
            raise StorageError(f"blob store {self.url!r}: LIST failed: {e}") from None
        return out


def _client_options() -> Any:
    allow = os.environ.get("AWS_ALLOW_HTTP", "").lower() in ("1", "true", "yes")
    return {"allow_http": True} if allow else {}
