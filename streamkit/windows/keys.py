"""Byte keys of windows in a sorted key-value store; plain code.

Layout of ``encode_window_key(key, start, end)``::

    escaped key | 0x00 0x01 | start (8 bytes) | end (8 bytes)

* *escaped key*: the key's bytes with every ``0x00`` written as ``0x00 0xFF``; the terminator
  ``0x00 0x01`` sorts below any escaped byte that may follow a ``0x00`` inside a key and the
  key's end cannot be mistaken for a byte of the key. So comparing two encoded keys compares
  the keys' bytes lexicographically first (a key sorts before every key it is a prefix of),
  and all windows of one key are contiguous.
* *start*, *end*: milliseconds as big-endian 64-bit integers with the sign bit flipped
  (``value + 2**63``), so unsigned byte order is numeric order, negatives included.

Byte order of encoded keys is therefore exactly the order of ``(key, start, end)``.
``window_range(key, lo, hi)`` gives the ``[lo_bytes, hi_bytes)`` bounds of the windows of
``key`` whose start lies in ``[lo, hi]``.

>>> k = encode_window_key(b"user", 1000, 2000)
>>> decode_window_key(k)
(b'user', 1000, 2000)
>>> lo, hi = window_range(b"user", 0, 1000)
>>> lo <= k < hi
True
"""

from __future__ import annotations

import struct

_TERMINATOR = b"\x00\x01"
_ESCAPED_ZERO = b"\x00\xff"
_INT = struct.Struct(">Q")
_TWO_INTS = struct.Struct(">QQ")
_OFFSET = 1 << 63
MIN_MS = -(1 << 63)
MAX_MS = (1 << 63) - 1


def encode_ms(value: int) -> bytes:
    """A signed 64-bit millisecond value as 8 bytes whose byte order is numeric order."""
    if not MIN_MS <= value <= MAX_MS:
        raise ValueError(f"time {value} ms does not fit in 64 bits")
    return _INT.pack(value + _OFFSET)


def decode_ms(data: bytes) -> int:
    return int(_INT.unpack(data)[0]) - _OFFSET


def key_prefix(key: bytes) -> bytes:
    """The bytes every window key of ``key`` starts with (and no other key's windows)."""
    return key.replace(b"\x00", _ESCAPED_ZERO) + _TERMINATOR


def encode_window_key(key: bytes, start_ms: int, end_ms: int) -> bytes:
    return key.replace(b"\x00", _ESCAPED_ZERO) + _TERMINATOR + encode_two_ms(start_ms, end_ms)


def encode_two_ms(first_ms: int, second_ms: int) -> bytes:
    """``encode_ms(first_ms) + encode_ms(second_ms)``, in one pack (this runs per record)."""
    try:
        return _TWO_INTS.pack(first_ms + _OFFSET, second_ms + _OFFSET)
    except struct.error:
        bad = first_ms if not MIN_MS <= first_ms <= MAX_MS else second_ms
        raise ValueError(f"time {bad} ms does not fit in 64 bits") from None


def decode_window_key(data: bytes) -> tuple[bytes, int, int]:
    """The ``(key, start_ms, end_ms)`` encoded in ``data``."""
    if len(data) < 18 or data[-18:-16] != _TERMINATOR:
        raise ValueError(f"not a window key: {data!r}")
    key = data[:-18].replace(_ESCAPED_ZERO, b"\x00")
    return key, decode_ms(data[-16:-8]), decode_ms(data[-8:])


def window_range(key: bytes, start_lo_ms: int, start_hi_ms: int) -> tuple[bytes, bytes]:
    """Bounds ``[lo, hi)`` of the encoded keys of ``key``'s windows with ``lo <= start <= hi``."""
    prefix = key_prefix(key)
    lo = prefix + encode_ms(max(start_lo_ms, MIN_MS))
    if start_hi_ms >= MAX_MS:
        # Past every start of this key: the terminator's last byte, one higher.
        return lo, prefix[:-1] + b"\x02"
    return lo, prefix + encode_ms(start_hi_ms + 1)
