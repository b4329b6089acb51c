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


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Decompress a record array compressed with a Kafka codec id."""
    if codec == NONE:
        return bytes(data)
    if codec not in CODEC_NAMES:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}")
    try:
        if codec == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"{CODEC_NAMES[codec]} data does not decompress: {exc}") from exc


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
