"""Values on the wire: type OIDs, text and binary encodings of engine scalars.

Contract: `OIDS[scalar]` is the PostgreSQL type OID announced for an engine scalar (`int` is
int8, `float` float8, `str` text, `bytes` bytea, `bool` bool; an all-NULL column is text, as
PostgreSQL resolves an unknown literal) or a declared column type (`int2`, `int4`, `float4`:
`portals.columns_of`; `wire_field` adds the `varchar(n)`/`bpchar(n)` type modifier).
`encode(value, scalar, binary)` renders one value (None stays NULL; a `bpchar(n)` one
blank-padded to n characters);
text output matches PostgreSQL's (`t`/`f`, shortest round-trip floats with PostgreSQL's
exponent rule — float4's of the float32 value, `float4_text` — `Infinity`/`NaN`, `\\x` hex
bytea); binary int2/int4 are 2/4 bytes (`22003` for a value that does not fit), float4 the
4-byte single-precision value. `decode(raw, oid, binary)`
parses a Bind parameter of a type OID into a Python scalar; `InvalidParameterValue` (22P02)
names the parameter's type when it does not parse.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from twofold.engine.boolinput import parse_bool
from twofold.sql.errors import NumericValueOutOfRange, SqlError

BOOL, BYTEA, INT8, INT2, INT4, TEXT, OID, FLOAT4, FLOAT8, UNKNOWN, VARCHAR, BPCHAR, NAME = (
    16, 17, 20, 21, 23, 25, 26, 700, 701, 705, 1043, 1042, 19)
NUMERIC = 1700
OID_ARRAY = 1028
CHAR = 18  # PostgreSQL's one-byte "char" (pg_class.relkind, ...)

OIDS: Final = {"bool": BOOL, "int": INT8, "float": FLOAT8, "str": TEXT, "bytes": BYTEA,
               "null": TEXT, "bool[]": 1000, "int[]": 1016, "float[]": 1022, "str[]": 1009,
               "int2vector": 22, "int4": INT4, "int2": INT2, "int8": INT8, "float4": FLOAT4,
               "float8": FLOAT8, "text": TEXT, "varchar": VARCHAR, "bpchar": BPCHAR,
               "bytea": BYTEA, "numeric": NUMERIC, "oid": OID, "oid[]": OID_ARRAY, "char": CHAR}
"""... the one-dimensional arrays the catalog relations hold (`str[]` is text[], ...), and the
declared column types (`int2`, `varchar`, ...) pg_catalog reports for SQL tables."""
_ELEMENT: Final = {"bool[]": (BOOL, "bool"), "int[]": (INT8, "int"), "float[]": (FLOAT8, "float"),
                   "str[]": (TEXT, "str"), "oid[]": (OID, "oid")}
SIZES: Final = {BOOL: 1, CHAR: 1, INT8: 8, FLOAT8: 8, TEXT: -1, BYTEA: -1, INT2: 2, INT4: 4,
                FLOAT4: 4, OID: 4}
SCALAR_OF_OID: Final = {BOOL: "bool", CHAR: "str", INT2: "int", INT4: "int", INT8: "int",
                        OID: "int", FLOAT4: "float", FLOAT8: "float", NUMERIC: "float", TEXT: "str",
                        VARCHAR: "str", BPCHAR: "str", NAME: "str", BYTEA: "bytes"}
BINARY_OIDS: Final = frozenset({BOOL, CHAR, INT2, INT4, INT8, FLOAT4, FLOAT8, TEXT, VARCHAR,
                                BPCHAR, NAME, BYTEA, OID})


class InvalidParameterValue(SqlError):
    """A Bind parameter that is not a value of its type (`22P02`)."""

    sqlstate = "22P02"


def float_text(x: float) -> str:
    """PostgreSQL's float8 output (extra_float_digits >= 1: shortest round trip)."""
    r = repr(x)
    if 1e-4 <= abs(x) < 1e15 and "e" not in r:
        # Where PostgreSQL writes no exponent, Python's shortest round trip is its digits:
        # only an integral value's ".0" differs.
        return r[:-2] if r.endswith(".0") else r
    return _float_text(x, r)


def _float_text(x: float, r: str) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    mantissa, _, _ = r.partition("e")
    digits = mantissa.replace("-", "").replace(".", "").lstrip("0").rstrip("0") or "0"
    # The shortest digits written with an exponent give its decimal exponent exactly
    # (`log10` rounds up just below a power of ten: 999999999999998 is not 1e15's).
    exp10 = int(f"{x:.{max(len(digits) - 1, 0)}e}".split("e")[1])
    if -4 <= exp10 < 15:
        s = f"{x:.{max(len(digits) - 1 - exp10, 0)}f}"
        return s
    m = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    sign = "-" if x < 0 else ""
    return f"{sign}{m}e{'+' if exp10 >= 0 else '-'}{abs(exp10):02d}"


def float4_text(x: float) -> str:
    """PostgreSQL's float4out (extra_float_digits >= 1) of `x` rounded to single precision:
    the shortest digits that round-trip the float32 value (never a decimal exactly halfway to
    a neighbour, which PostgreSQL's Ryu does not accept), written without an exponent for
    decimal exponents -4..5 (`0.1`, `123456.7`, `1e+06`, `1e-05`, `3.4028235e+38`)."""
    try:
        f = _F4.unpack(_F4.pack(x))[0]
    except OverflowError:
        f = math.copysign(math.inf, x)
    if f != f:
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    a = abs(f)
    if a < _F4_MIN_NORMAL or math.frexp(a)[0] == 0.5:
        sci = _float4_numpy(f)  # subnormal, or a power of two (its gaps differ): rare
    else:
        lo, hi = 1, 9  # the fewest significant digits whose correct rounding round-trips
        while lo < hi:
            mid = (lo + hi) // 2
            if _round_trips(f, f"{f:.{mid - 1}e}"):
                hi = mid
            else:
                lo = mid + 1
        sci = f"{f:.{lo - 1}e}"
    mantissa, _, exponent = sci.partition("e")
    exp10 = int(exponent)
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    if exp10 < -4 or exp10 >= 6:
        return f"{mantissa}e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "")
    if exp10 < 0:
        return f"{sign}0.{'0' * (-exp10 - 1)}{digits}"
    whole, frac = digits[:exp10 + 1], digits[exp10 + 1:]
    return f"{sign}{whole}{'0' * (exp10 + 1 - len(whole))}{'.' + frac if frac else ''}"


_F4 = struct.Struct("!f")
_F4_MIN_NORMAL: Final = 1.1754943508222875e-38


def _round_trips(f: float, text: str) -> bool:
    """Whether decimal `text` reads back as float32 `f` and is not exactly halfway to a
    neighbour (a double with 25 significant bits, not 24: f is normal and not a power of
    two, so both neighbours are at the same distance)."""
    v = float(text)
    if _F4.unpack(_F4.pack(v))[0] != f:
        return False
    m = math.frexp(v)[0] * 33554432.0  # 2**25
    return not (m.is_integer() and not (m / 2).is_integer())


def _float4_numpy(f: float) -> str:
    """float4out's digits of float32 `f` by numpy's shortest repr (Dragon4), one digit more
    where that is exactly halfway to a neighbour."""
    f32 = np.float32(f)
    sci = np.format_float_scientific(f32, unique=True, trim="-", exp_digits=2)
    if _on_bound(f32, sci):
        for p in range(len(sci.partition("e")[0].replace("-", "").replace(".", "")), 9):
            sci = np.format_float_scientific(f32, precision=p, unique=False, trim="-",
                                             exp_digits=2)
            if np.float32(sci) == f32 and not _on_bound(f32, sci):
                break
    return sci


def _on_bound(f: np.float32, text: str) -> bool:
    """Whether decimal `text` is exactly halfway between float32 `f` and a neighbour (both
    halves are exact in double precision)."""
    v, x = float(text), float(f)
    with np.errstate(over="ignore"):  # the neighbour of the largest float is infinity
        down = float(np.nextafter(f, np.float32(-np.inf)))
        up = float(np.nextafter(f, np.float32(np.inf)))
    return v == (x + down) / 2 or v == (x + up) / 2


def encode_text(value: Any, scalar: str) -> bytes:
    if value is True:
        return b"t"
    if value is False:
        return b"f"
    if isinstance(value, float):
        return (float4_text(value) if scalar == "float4" else float_text(value)).encode()
    if isinstance(value, bytes):
        return b"\\x" + value.hex().encode()
    if isinstance(value, list):
        return array_text(value, scalar)
    n = _bpchar_length(scalar) if scalar[:1] == "b" else None
    return str(value).encode("utf-8") if n is None else _padded(value, n)


def array_text(values: list[Any], scalar: str) -> bytes:
    """PostgreSQL's text form of a one-dimensional array: `{1,2}`, `{a,"b c",NULL}`."""
    element = _ELEMENT.get(scalar, (TEXT, "str"))[1]
    out = []
    for v in values:
        if v is None:
            out.append("NULL")
            continue
        t = encode_text(v, element).decode("utf-8")
        if t == "" or t.upper() == "NULL" or any(c in t for c in '{},"\\ \t\n'):
            t = '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out.append(t)
    return ("{" + ",".join(out) + "}").encode("utf-8")


def array_binary(values: list[Any], scalar: str) -> bytes:
    """PostgreSQL's binary array: ndim 1, a NULL flag, the element OID, size and lower bound
    1, then each element length-prefixed (-1: NULL)."""
    oid, element = _ELEMENT.get(scalar, (TEXT, "str"))
    parts = [struct.pack("!iiiii", 1, any(v is None for v in values), oid, len(values), 1)]
    for v in values:
        b = encode(v, element, True)
        parts.append(struct.pack("!i", -1) if b is None else struct.pack("!i", len(b)) + b)
    return b"".join(parts)


def encode(value: Any, scalar: str, binary: bool) -> bytes | None:
    if value is None:
        return None
    if not binary:
        return encode_text(value, scalar)
    if scalar == "bool":
        return b"\x01" if value else b"\x00"
    if scalar == "int":
        return _Q.pack(value)
    if scalar == "int4":  # a declared integer column; pg_backend_pid()
        return _narrow(_I, value, "integer")
    if scalar == "int2":
        return _narrow(_H, value, "smallint")
    if scalar == "oid":  # a catalog relation's oid column (pg_attribute.atttypid)
        return _OID.pack(value)
    if scalar == "float":
        return _D.pack(value)
    if scalar == "float4":
        return float4_binary(value)
    if scalar == "bytes":
        return bytes(value)
    if isinstance(value, list):
        return array_binary(value, scalar)
    n = _bpchar_length(scalar) if scalar[:1] == "b" else None
    return str(value).encode("utf-8") if n is None else _padded(value, n)


_Q, _I, _H, _D = struct.Struct("!q"), struct.Struct("!i"), struct.Struct("!h"), struct.Struct("!d")
_OID = struct.Struct("!I")
_F4_PACK = _F4.pack


def _narrow(packer: struct.Struct, value: int, name: str) -> bytes:
    """`value` as a 4- or 2-byte integer; `22003` if it does not fit (only a value written
    around SQL's range checks, by the Python API, can be outside a declared column's range)."""
    try:
        return packer.pack(value)
    except struct.error:
        raise NumericValueOutOfRange(f"{name} out of range") from None


def float4_binary(value: float) -> bytes:
    """`value` rounded to single precision, as PostgreSQL's float4send (infinity where a
    double beyond the float range was stored around SQL's checks)."""
    try:
        return _F4_PACK(value)
    except OverflowError:
        return _F4_PACK(math.copysign(math.inf, value))


_EXACT_TEXT: Final[dict[str, tuple[type, Callable[[Any], bytes]]]] = {
    "int": (int, lambda v: str(v).encode()),
    "int4": (int, lambda v: str(v).encode()),
    "int2": (int, lambda v: str(v).encode()),
    "float": (float, lambda v: float_text(v).encode()),
    "float4": (float, lambda v: float4_text(v).encode()),
    "str": (str, lambda v: v.encode("utf-8")),
}
"""A text column's values of its usual Python type, encoded as `encode_text` does."""


def wire_field(scalar: str) -> tuple[int, int, int]:
    """The type OID, size and type modifier a result column of wire type `scalar`
    (`portals.columns_of`) is announced with in a RowDescription: `varchar(n)` / `bpchar(n)`
    are varchar / bpchar with modifier n + 4, as PostgreSQL's `atttypmod`; the rest -1."""
    base, paren, rest = scalar.partition("(")
    length = rest[:-1]
    if not paren or not length.isdigit():
        oid = OIDS.get(scalar, TEXT)
        return oid, SIZES.get(oid, -1), -1
    oid = OIDS.get(base, TEXT)
    return oid, SIZES.get(oid, -1), int(length) + 4


def _bpchar_length(scalar: str) -> int | None:
    """n for wire type `bpchar(n)`, else None."""
    if not scalar.startswith("bpchar(") or not scalar[7:-1].isdigit():
        return None
    return int(scalar[7:-1])


def _padded(value: Any, n: int) -> bytes:
    """A `char(n)` value as PostgreSQL sends it: blank-padded to n characters (twofold keeps
    it without its trailing spaces: `docs/sql.md`)."""
    return str(value).ljust(n).encode("utf-8")


def encoder(scalar: str, binary: bool) -> Callable[[Any], bytes | None]:
    """`encode(value, scalar, binary)` as a function of the value, with the checks that do
    not depend on it done once (a result column's encoder)."""
    n = _bpchar_length(scalar)
    if n is not None:  # the same bytes in text and binary, as PostgreSQL's bpcharsend
        return lambda value: None if value is None else _padded(value, n)
    exact = None if binary else _EXACT_TEXT.get(scalar)
    if exact is not None:
        kind, fast = exact

        def text(value: Any) -> bytes | None:
            if type(value) is kind:
                return fast(value)
            return None if value is None else encode_text(value, scalar)
        return text
    if binary and scalar == "int":
        pack = _Q.pack
        return lambda value: None if value is None else pack(value)
    if binary and scalar == "float":
        pack_d = _D.pack
        return lambda value: None if value is None else pack_d(value)
    if binary and scalar == "float4":
        return lambda value: None if value is None else float4_binary(value)
    return lambda value: encode(value, scalar, binary)


def _bool(text: str) -> bool:
    b = parse_bool(text)  # PostgreSQL's spellings: 't', 'yes', 'on', '1', prefixes ...
    if b is None:
        raise ValueError(text)
    return b


def decode_text(text: str, scalar: str) -> Any:
    if scalar == "int":
        return int(text.strip())
    if scalar == "float":
        return float(text.strip())
    if scalar == "bool":
        return _bool(text)
    if scalar == "bytes":
        if text.startswith("\\x"):
            return bytes.fromhex(text[2:])
        return text.encode("utf-8")
    return text


def decode(raw: bytes | None, oid: int, binary: bool, position: int) -> Any:
    if raw is None:
        return None
    try:
        return decoder(oid, binary)(raw)
    except (ValueError, KeyError, struct.error, UnicodeDecodeError) as e:
        raise InvalidParameterValue(f"parameter ${position} is not a valid value of type "
                                    f"OID {oid}: {e}") from None


_INTS: Final = {2: struct.Struct("!h"), 4: struct.Struct("!i"), 8: struct.Struct("!q")}
_F8 = struct.Struct("!d")


def _binary_int(raw: bytes) -> int:
    return int(_INTS[len(raw)].unpack(raw)[0])


def _binary_float(raw: bytes) -> float:
    return float((_F4 if len(raw) == 4 else _F8).unpack(raw)[0])


def _utf8(raw: bytes) -> str:
    return raw.decode("utf-8")


def _binary_oid_array(raw: bytes) -> list[int | None]:
    """A one-dimensional binary array of 4-byte oids (PostgreSQL's array_send)."""
    ndim, _, _ = struct.unpack_from("!iii", raw)
    if ndim == 0:
        return []
    if ndim != 1:
        raise ValueError("only one-dimensional arrays are supported")
    count, _ = struct.unpack_from("!ii", raw, 12)
    out: list[int | None] = []
    at = 20
    for _ in range(count):
        (size,) = struct.unpack_from("!i", raw, at)
        at += 4
        if size < 0:
            out.append(None)
            continue
        out.append(_binary_int(raw[at:at + size]) & 0xFFFFFFFF)
        at += size
    if at != len(raw):
        raise ValueError("trailing bytes after the array")
    return out


def _text_int_array(raw: bytes) -> list[int | None]:
    """`{1,2,NULL}`."""
    text = raw.decode("utf-8").strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError(f"malformed array literal: {text!r}")
    body = text[1:-1].strip()
    return [None if e.strip().upper() == "NULL" else int(e)
            for e in body.split(",")] if body else []


def _unsupported(raw: bytes) -> Any:
    raise ValueError("binary format of this type is not supported")


@functools.lru_cache(maxsize=64)
def decoder(oid: int, binary: bool) -> Callable[[bytes], Any]:
    """The parser of a non-NULL parameter of type `oid` in binary or text format: a Python
    scalar, or ValueError, KeyError, struct.error or UnicodeDecodeError (`decode` turns those
    into 22P02)."""
    if oid == OID_ARRAY:  # `$1::oid[]`: a list of ints
        return _binary_oid_array if binary else _text_int_array
    if binary:
        if oid == BOOL:
            return lambda raw: raw != b"\x00"
        if oid in (INT2, INT4, INT8, OID):
            return _binary_int
        if oid in (FLOAT4, FLOAT8):
            return _binary_float
        if oid == BYTEA:
            return bytes
        if oid in (TEXT, VARCHAR, BPCHAR, NAME, UNKNOWN, CHAR):
            return _utf8
        return _unsupported
    scalar = SCALAR_OF_OID.get(oid, "str")
    if scalar == "str":
        return _utf8
    return lambda raw: decode_text(raw.decode("utf-8"), scalar)
