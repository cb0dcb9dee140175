"""Storage beyond one machine: PostgreSQL consensus plus object-store blobs (persist's design).

`postgres://user@host:port/db?blob=file:///dir` or `...?blob=s3://bucket/prefix`; see
`backend.py` for the write protocol, `consensus.py` for the compare-and-set and idempotency,
`state.py` for the shard state, `readers.py` for leased and critical readers, `blob.py` for
blobs, `oracle.py` for timestamps.
"""

from twofold.storage.persist.backend import PersistBackend, parse_url
from twofold.storage.persist.oracle import PgTimestampOracle
from twofold.storage.persist.readers import CriticalReader, LeasedReader

__all__ = ["CriticalReader", "LeasedReader", "PersistBackend", "PgTimestampOracle", "parse_url"]
