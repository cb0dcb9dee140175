"""The wire codec: MessagePack payloads for commands and responses, and stream framing.

`encode(message)` turns any protocol value into bytes; `decode_command` / `decode_response` are
total on bytes: malformed, truncated, unknown or oversized input raises `DecodeError` (a
`ValueError`) and nothing else. Tagged unions are maps whose `"type"` key names the variant.
`GlobalId` travels as its string form and `Frontier` as a list of zero or one integers.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec

from twofold.protocol.commands import ComputeCommand
from twofold.protocol.errors import DecodeError, FrameTooLarge
from twofold.protocol.framing import FrameDecoder, frame, read_frame, write_frame
from twofold.protocol.frontier import Frontier
from twofold.protocol.ids import GlobalId
from twofold.protocol.responses import ComputeResponse

DEFAULT_MAX_MESSAGE: Final = 64 * 1024 * 1024
"""Default limit on one message (and one frame payload): 64 MiB."""


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, GlobalId):
        return str(obj)
    if isinstance(obj, Frontier):
        return obj.to_wire()
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


_IDS: dict[str, GlobalId] = {}
"""Parsed ids by their wire string: every peek names its collection, and parsing the string
was ~7% of a replica front's CPU per point lookup. `GlobalId`s are immutable, so one instance
serves every message naming it. Only valid ids are kept, at most `_IDS_MAX` of them (then the
cache starts over), so hostile input cannot grow it."""
_IDS_MAX: Final = 4096


def _dec_hook(typ: type, obj: Any) -> Any:
    # msgspec wraps ValueError/TypeError raised here into a ValidationError naming the path.
    if typ is GlobalId:
        if type(obj) is str:
            found = _IDS.get(obj)
            if found is not None:
                return found
        elif not isinstance(obj, str):
            raise TypeError(f"expected a GlobalId string, got {type(obj).__name__}")
        gid = GlobalId.parse(obj)
        if len(_IDS) >= _IDS_MAX:
            _IDS.clear()
        _IDS[str(obj)] = gid
        return gid
    if typ is Frontier:
        if not isinstance(obj, list) or len(obj) > 1:
            raise TypeError("expected a frontier: a list of zero or one timestamps")
        if obj and (isinstance(obj[0], bool) or not isinstance(obj[0], int)):
            raise TypeError("a frontier element must be an int")
        return Frontier.from_wire(obj)
    raise NotImplementedError(f"cannot decode {typ!r}")


_encoder: Final = msgspec.msgpack.Encoder(enc_hook=_enc_hook, uuid_format="bytes")
_command_decoder: Final = msgspec.msgpack.Decoder(ComputeCommand, dec_hook=_dec_hook)
_response_decoder: Final = msgspec.msgpack.Decoder(ComputeResponse, dec_hook=_dec_hook)

T = TypeVar("T")
Buffer = bytes | bytearray | memoryview
"""What the decoders accept (anything else is a `DecodeError`)."""


def encode(message: Any) -> bytes:
    """Encode a protocol value (a command, a response, or any value inside one)."""
    if not isinstance(message, msgspec.Struct):
        raise TypeError(f"encode expects a protocol value, got {type(message).__name__}")
    return _encoder.encode(message)


def _decode(decoder: msgspec.msgpack.Decoder[T], data: Buffer, max_size: int, what: str) -> T:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"cannot decode a {what} from {type(data).__name__}")
    if len(data) > max_size:
        raise DecodeError(f"{what} of {len(data)} bytes exceeds the limit of {max_size} bytes")
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise DecodeError(f"malformed {what}: {e}") from None
    except (RecursionError, ValueError, TypeError, OverflowError) as e:
        raise DecodeError(f"malformed {what}: {type(e).__name__}: {e}") from None


def decode_command(data: Buffer, *, max_size: int = DEFAULT_MAX_MESSAGE) -> ComputeCommand:
    """Decode one `ComputeCommand`; raises `DecodeError` on any invalid input."""
    return _decode(_command_decoder, data, max_size, "command")


def decode_response(data: Buffer, *, max_size: int = DEFAULT_MAX_MESSAGE) -> ComputeResponse:
    """Decode one `ComputeResponse`; raises `DecodeError` on any invalid input."""
    return _decode(_response_decoder, data, max_size, "response")


def value_decoder(typ: type[T]) -> msgspec.msgpack.Decoder[T]:
    """A decoder for `typ` (a protocol value, or a struct or union of structs built from them)
    that reads `GlobalId`s and `Frontier`s as `encode` writes them."""
    return msgspec.msgpack.Decoder(typ, dec_hook=_dec_hook)


__all__ = [
    "DEFAULT_MAX_MESSAGE",
    "DecodeError",
    "FrameDecoder",
    "FrameTooLarge",
    "decode_command",
    "decode_response",
    "encode",
    "frame",
    "read_frame",
    "value_decoder",
    "write_frame",
]
