"""Record-batch compression codecs, the one module that uses ``cramjam``.

Codec ids are Kafka's (attribute bits 0-2): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
Snappy comes in two framings: raw (librdkafka, Kafka's Java client) and xerial
(snappy-java's stream format, written by aiokafka and kafka-python); we read both and write raw.
LZ4 is the standard LZ4 frame format (KIP-57) with independent blocks: Kafka's Java reader
rejects block-linked frames ("Dependent block stream is unsupported"), which is what
``cramjam.lz4.compress`` writes by default, so we use a configured ``Compressor`` instead.

Every failure to decompress leaves this module as a ``CorruptRecordError`` (cramjam's
``DecompressionError`` is wrapped); an unknown codec id as an ``UnsupportedCompressionError``.
"""

from __future__ import annotations

import struct
from typing import Any

import cramjam

from streamkit.log.errors import CorruptRecordError, UnsupportedCompressionError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16  # magic (8) + version (4) + compatible version (4)
_INT32 = struct.Struct(">i")

# A snappy element expands at most 64 bytes out of 3 (a 2-byte-offset copy), so no valid
# block decompresses to more than ~21.4x its size. A raw block starts with its uncompressed
# length; cramjam allocates that much up front and aborts the process when the allocation
# fails, so a 5-byte forged length could kill a consumer. We check the length against this
# bound first.
_SNAPPY_MAX_RATIO = 22

# The most bytes one batch's records may decompress to. Kafka bounds the compressed batch
# (max.message.bytes, 1 MiB by default) but not what it expands to; legitimate record data
# rarely compresses beyond 10-50x, a bomb by 1000x and more.
MAX_DECOMPRESSED_BYTES = 128 * 1024 * 1024
_FIRST_GUESS_RATIO = 8
_FIRST_GUESS_MIN = 64 * 1024
# What cramjam's *_into functions report when the output buffer is too small.
_BUFFER_FULL = "failed to write whole buffer"
_STREAM_CODECS: dict[int, Any] = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}


def compress(codec: int, data: bytes) -> bytes:
    """Compress ``data`` with a Kafka codec id."""
    if codec == NONE:
        return data
    if codec == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCompressionError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | memoryview, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress a record array compressed with a Kafka codec id.

    Never produces more than ``limit`` bytes: a batch that would (a compression bomb: a few
    KiB of zstd can claim gigabytes) is a ``CorruptRecordError``, found without allocating
    more than ``limit``.
    """
    if codec == NONE:
        return bytes(data)
    if codec not in CODEC_NAMES:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}")
    name = CODEC_NAMES[codec]
    try:
        if codec == SNAPPY:
            out = _snappy_decompress(bytes(data))  # bounded by _SNAPPY_MAX_RATIO per block
            if len(out) > limit:
                raise CorruptRecordError(f"snappy data decompresses to more than {limit} bytes")
            return out
        return _decompress_bounded(_STREAM_CODECS[codec], name, data, limit)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"{name} data does not decompress: {exc}") from exc


def _decompress_bounded(module: Any, name: str, data: bytes | memoryview, limit: int) -> bytes:
    """Decompress into buffers of growing size, up to ``limit``: cramjam stops writing at a
    full buffer and reports it, so the output never outgrows the buffer we allocated."""
    size = min(limit, max(_FIRST_GUESS_MIN, _FIRST_GUESS_RATIO * len(data)))
    while True:
        out = bytearray(size)
        try:
            written = module.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _BUFFER_FULL not in str(exc):
                raise
            if size >= limit:
                raise CorruptRecordError(f"{name} data decompresses to more than {limit} bytes") from exc
            size = min(limit, size * 4)
            continue
        return bytes(memoryview(out)[:written])


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_decompress_raw(data)
    # xerial framing: a 16-byte header, then blocks of (INT32 length, raw snappy block).
    out = bytearray()
    pos = _XERIAL_HEADER_SIZE
    end = len(data)
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("truncated xerial snappy block header")
        (size,) = _INT32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise CorruptRecordError("truncated xerial snappy block")
        out += _snappy_decompress_raw(data[pos : pos + size])
        pos += size
    return bytes(out)


def _snappy_decompress_raw(block: bytes) -> bytes:
    # The block's preamble: its uncompressed length as an unsigned LEB128 varint (<= 5 bytes).
    length = shift = 0
    for i in range(min(5, len(block))):
        byte = block[i]
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    if length > _SNAPPY_MAX_RATIO * len(block):
        raise CorruptRecordError(
            f"snappy block of {len(block)} bytes claims {length} uncompressed bytes"
        )
    return bytes(cramjam.snappy.decompress_raw(block))
