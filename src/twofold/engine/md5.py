"""MD5 of a whole text column in numpy: PostgreSQL's `md5(text)` (RFC 1321, lower-case hex).

Contract: `md5_hex(col)` gives, per row of a String series, the 32 hex digits of the MD5 of
the row's UTF-8 bytes (NULL for NULL). The rows are padded as RFC 1321 says into one flat
buffer of 64-byte blocks; then block `k` of every row that has one is hashed at once, the 64
rounds as vector operations over those rows, so the Python work is per block position, not per
row. Rows longer than `_LONG` bytes (whose blocks few other rows share, so vectorising gains
nothing) are hashed by `hashlib`, one call each: that per-row cost is amortised over at least
`_LONG` bytes of hashing.
"""

from __future__ import annotations

import hashlib
from typing import Final

import numpy as np
import polars as pl
import pyarrow as pa

_LONG: Final = 4096
_SHIFTS: Final = np.array([7, 12, 17, 22] * 4 + [5, 9, 14, 20] * 4 + [4, 11, 16, 23] * 4
                          + [6, 10, 15, 21] * 4, dtype=np.uint32)
_K: Final = (np.floor(np.abs(np.sin(np.arange(1, 65, dtype=np.float64))) * 2.0**32)
             .astype(np.uint64).astype(np.uint32))
_WORD: Final = np.array([i for i in range(16)] + [(5 * i + 1) % 16 for i in range(16)]
                        + [(3 * i + 5) % 16 for i in range(16)]
                        + [(7 * i) % 16 for i in range(16)], dtype=np.int64)
_INIT: Final = (0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476)
_HEX: Final = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def md5_hex(col: pl.Series) -> pl.Series:
    """The lower-case hex MD5 digest of each row's UTF-8 bytes; NULL stays NULL."""
    n = len(col)
    arr = col.cast(pl.Binary).to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    arr = arr.cast(pa.large_binary())
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
    data_buf = arr.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(
        0, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    digests = np.zeros((n, 16), dtype=np.uint8)
    long = lengths > _LONG
    short = ~long
    if short.any():
        rows = np.flatnonzero(short)
        digests[rows] = _md5_rows(data, starts[rows], lengths[rows])
    for r in np.flatnonzero(long):
        chunk = data[starts[r]:starts[r] + lengths[r]].tobytes()
        digests[r] = np.frombuffer(hashlib.md5(chunk).digest(), dtype=np.uint8)
    hexed = np.empty((n, 32), dtype=np.uint8)
    hexed[:, 0::2] = _HEX[digests >> 4]
    hexed[:, 1::2] = _HEX[digests & 15]
    out = pa.StringArray.from_buffers(
        n, pa.py_buffer(np.arange(0, 32 * (n + 1), 32, dtype=np.int32).tobytes()),
        pa.py_buffer(hexed.tobytes()))
    result = pl.Series(col.name, out, dtype=pl.String)
    if not valid.all():
        result = pl.select(pl.when(pl.Series(valid)).then(result)).to_series().alias(col.name)
    return result


def _md5_rows(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(rows, 16) digests of the byte ranges `data[starts[i]:starts[i] + lengths[i]]`."""
    m = len(starts)
    blocks = (lengths + 8) // 64 + 1
    padded = blocks * 64
    base = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(padded, out=base[1:])
    buf = np.zeros(int(base[-1]), dtype=np.uint8)
    total = int(lengths.sum())
    if total:
        row = np.repeat(np.arange(m), lengths)
        within = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        buf[base[row] + within] = data[starts[row] + within]
    buf[base[:-1] + lengths] = 0x80
    bits = (lengths.astype(np.uint64) * np.uint64(8)).astype("<u8").view(np.uint8).reshape(m, 8)
    buf[(base[:-1] + padded - 8)[:, None] + np.arange(8)] = bits
    words = buf.view("<u4")
    state = np.array([np.full(m, v, dtype=np.uint32) for v in _INIT])
    for k in range(int(blocks.max())):
        act = np.flatnonzero(blocks > k)
        first = base[act] // 4 + 16 * k
        block = words[first[:, None] + np.arange(16)]  # (active rows, 16)
        a, b, c, d = (state[i, act] for i in range(4))
        a0, b0, c0, d0 = a, b, c, d
        for i in range(64):
            if i < 16:
                f = (b & c) | (~b & d)
            elif i < 32:
                f = (d & b) | (~d & c)
            elif i < 48:
                f = b ^ c ^ d
            else:
                f = c ^ (b | ~d)
            f = f + a + _K[i] + block[:, _WORD[i]]
            s = _SHIFTS[i]
            a, d, c = d, c, b
            b = b + ((f << s) | (f >> (np.uint32(32) - s)))
        state[0, act] = a0 + a
        state[1, act] = b0 + b
        state[2, act] = c0 + c
        state[3, act] = d0 + d
    return state.T.astype("<u4").copy().view(np.uint8).reshape(m, 16)
