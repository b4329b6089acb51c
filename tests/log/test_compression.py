"""Record-batch compression codecs: round trips, the real clients' encodings, hostile input."""

from __future__ import annotations

import struct

import aiokafka.codec
import hypothesis.strategies as st
import kafka.codec
import pytest
from hypothesis import assume, given, settings

from streamkit.log import compression
from streamkit.log.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from streamkit.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionError,
)

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
COMPRESSED = [GZIP, SNAPPY, LZ4, ZSTD]
SETTINGS = settings(max_examples=200, deadline=None)

# Enough repetition to compress, and past snappy-java's 32 KiB xerial block size.
BIG = b"".join(b"record %06d: some fairly repetitive payload\n" % i for i in range(2000))


def test_codec_names_and_ids_match_kafka() -> None:
    assert compression.CODEC_NAMES == {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    assert compression.CODEC_IDS["zstd"] == ZSTD


@pytest.mark.parametrize("codec", CODECS, ids=compression.CODEC_NAMES.get)
@pytest.mark.parametrize("data", [b"", b"x", BIG], ids=["empty", "one-byte", "big"])
def test_round_trip(codec: int, data: bytes) -> None:
    packed = compression.compress(codec, data)
    assert compression.decompress(codec, packed) == data
    assert compression.decompress(codec, memoryview(b"??" + packed)[2:]) == data
    if codec != NONE and data is BIG:
        assert len(packed) < len(data) // 4


@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=5000))
@SETTINGS
def test_round_trip_property(codec: int, data: bytes) -> None:
    assert compression.decompress(codec, compression.compress(codec, data)) == data


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_is_unsupported(codec: int) -> None:
    with pytest.raises(UnsupportedCompressionError):
        compression.compress(codec, b"data")
    with pytest.raises(UnsupportedCompressionError):
        compression.decompress(codec, b"data")
    assert issubclass(UnsupportedCompressionError, InvalidRecordError)


def test_lz4_frames_have_independent_blocks() -> None:
    """Kafka's Java reader rejects block-linked LZ4 frames; librdkafka writes independent ones."""
    frame = compression.compress(LZ4, BIG)
    assert frame[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg = frame[4]
    assert flg >> 6 == 1  # frame version 01
    assert flg & 0x20, "block independence flag must be set"
    assert not flg & 0x04, "no content checksum, like Kafka's own writer"


def test_snappy_writes_raw_blocks() -> None:
    assert not compression.compress(SNAPPY, BIG).startswith(b"\x82SNAPPY\x00")


# --- what the real clients write -------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"abc", BIG], ids=["empty", "short", "multi-block"])
def test_reads_xerial_snappy_from_aiokafka(data: bytes) -> None:
    framed = aiokafka.codec.snappy_encode(data, xerial_compatible=True)
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert compression.decompress(SNAPPY, framed) == data
    raw = aiokafka.codec.snappy_encode(data, xerial_compatible=False)
    assert compression.decompress(SNAPPY, raw) == data


def test_xerial_snappy_has_several_blocks_for_big_data() -> None:
    framed = aiokafka.codec.snappy_encode(BIG, xerial_compatible=True, xerial_blocksize=4096)
    (first_block,) = struct.unpack_from(">i", framed, 16)
    assert 20 + first_block < len(framed)  # more blocks follow
    assert compression.decompress(SNAPPY, framed) == BIG


def _require_kafka_python_codec(codec: int) -> None:
    available = {
        GZIP: kafka.codec.has_gzip,
        SNAPPY: kafka.codec.has_snappy,
        LZ4: kafka.codec.has_lz4,
        ZSTD: kafka.codec.has_zstd,
    }[codec]()
    package = {SNAPPY: "python-snappy", LZ4: "lz4", ZSTD: "zstandard"}.get(codec)
    assert available, f"kafka-python needs the {package!r} package for this codec (dev extra)"


KAFKA_PYTHON_CODECS = {
    GZIP: (kafka.codec.gzip_encode, kafka.codec.gzip_decode),
    SNAPPY: (kafka.codec.snappy_encode, kafka.codec.snappy_decode),
    LZ4: (lambda d: kafka.codec.lz4_encode(d), lambda d: kafka.codec.lz4_decode(d)),
    ZSTD: (kafka.codec.zstd_encode, kafka.codec.zstd_decode),
}
AIOKAFKA_CODECS = {
    GZIP: (aiokafka.codec.gzip_encode, aiokafka.codec.gzip_decode),
    SNAPPY: (aiokafka.codec.snappy_encode, aiokafka.codec.snappy_decode),
    LZ4: (aiokafka.codec.lz4_encode, aiokafka.codec.lz4_decode),
    ZSTD: (aiokafka.codec.zstd_encode, aiokafka.codec.zstd_decode),
}


@pytest.mark.parametrize("codec", COMPRESSED, ids=compression.CODEC_NAMES.get)
@pytest.mark.parametrize("data", [b"", b"abc", BIG], ids=["empty", "short", "big"])
def test_codecs_agree_with_kafka_python(codec: int, data: bytes) -> None:
    _require_kafka_python_codec(codec)
    encode, decode = KAFKA_PYTHON_CODECS[codec]
    assert compression.decompress(codec, encode(data)) == data
    assert decode(compression.compress(codec, data)) == data


@pytest.mark.parametrize("codec", COMPRESSED, ids=compression.CODEC_NAMES.get)
@pytest.mark.parametrize("data", [b"", b"abc", BIG], ids=["empty", "short", "big"])
def test_codecs_agree_with_aiokafka(codec: int, data: bytes) -> None:
    encode, decode = AIOKAFKA_CODECS[codec]
    assert compression.decompress(codec, encode(data)) == data
    assert decode(compression.compress(codec, data)) == data


# --- hostile input ---------------------------------------------------------------------------


# The magic a frame of each codec starts with: bytes without it are no frame at all.
FRAME_MAGIC = {
    GZIP: b"\x1f\x8b",
    LZ4: b"\x04\x22\x4d\x18",
    ZSTD: b"\x28\xb5\x2f\xfd",
    SNAPPY: b"\x82SNAPPY\x00",  # xerial; raw snappy has no magic (see the next test)
}


@given(codec=st.sampled_from([GZIP, LZ4, ZSTD]), junk=st.binary(max_size=300))
@SETTINGS
def test_garbage_raises_corrupt_record_error(codec: int, junk: bytes) -> None:
    assume(not junk.startswith(FRAME_MAGIC[codec]))
    with pytest.raises(CorruptRecordError):
        compression.decompress(codec, junk)


@given(junk=st.binary(max_size=300))
@SETTINGS
def test_snappy_garbage_raises_corrupt_record_error_unless_it_is_a_whole_raw_block(junk: bytes) -> None:
    # Raw snappy has no magic and no checksum: some junk is a valid block (b"\x00" is the
    # empty one). Junk that decodes must then give exactly the length its preamble claims.
    assume(not junk.startswith(FRAME_MAGIC[SNAPPY]))
    try:
        out = compression.decompress(SNAPPY, junk)
    except CorruptRecordError:
        return
    claimed = shift = 0
    for byte in junk[:5]:
        claimed |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
    assert len(out) == claimed


def test_garbage_examples_raise_corrupt_record_error() -> None:
    for codec in COMPRESSED:
        for junk in (b"", b"abc", b"\x00\x00\x00", FRAME_MAGIC[codec] + b"\xff" * 20):
            with pytest.raises(CorruptRecordError):
                compression.decompress(codec, junk)


def _damage(packed: bytes, edits: list[tuple[int, int]], cut: int) -> bytes:
    damaged = bytearray(packed)
    for pos, byte in edits:
        damaged[pos % len(damaged)] = byte
    del damaged[cut % (len(damaged) + 1) :]
    return bytes(damaged)


@given(
    data=st.binary(min_size=1, max_size=2000),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 10_000),
)
@SETTINGS
def test_damaged_gzip_frames_raise_corrupt_record_error(
    data: bytes, edits: list[tuple[int, int]], cut: int
) -> None:
    # gzip is the one codec whose frame carries a checksum of its content (CRC-32 and length):
    # damage either raises or touched only bytes no decoder reads (header time, OS byte).
    packed = compression.compress(GZIP, data * 3)
    damaged = _damage(packed, edits, cut)
    assume(damaged != packed)
    try:
        out = compression.decompress(GZIP, damaged)
    except CorruptRecordError:
        return
    assert out == data * 3
    assert len(damaged) == len(packed)


@given(
    codec=st.sampled_from([SNAPPY, LZ4, ZSTD]),
    data=st.binary(min_size=1, max_size=2000),
    cut=st.integers(0, 10_000),
)
@SETTINGS
def test_truncated_frames_raise_corrupt_record_error(codec: int, data: bytes, cut: int) -> None:
    # Without a content checksum a changed byte may decode to other data (the batch CRC
    # catches that, a level up), but a frame cut short is always detected.
    packed = compression.compress(codec, data * 3)
    with pytest.raises(CorruptRecordError):
        compression.decompress(codec, packed[: cut % len(packed)])


def test_truncated_xerial_frames_raise_corrupt_record_error() -> None:
    framed = aiokafka.codec.snappy_encode(BIG, xerial_compatible=True)
    for cut in (17, 18, 19, 20, 21, 100, len(framed) - 1):
        with pytest.raises(CorruptRecordError):
            compression.decompress(SNAPPY, framed[:cut])
    negative = framed[:16] + struct.pack(">i", -5) + framed[20:]
    with pytest.raises(CorruptRecordError):
        compression.decompress(SNAPPY, negative)


@pytest.mark.parametrize("claimed", [2**32 - 1, 2**31, 10**9], ids=["4GiB", "2GiB", "1GB"])
def test_snappy_block_claiming_a_huge_length_is_refused_before_allocating(claimed: int) -> None:
    """cramjam allocates the claimed size up front and aborts the process if it cannot."""
    preamble = bytearray()
    v = claimed
    while v >= 0x80:
        preamble.append((v & 0x7F) | 0x80)
        v >>= 7
    preamble.append(v)
    raw = bytes(preamble) + b"\x00" * 8
    with pytest.raises(CorruptRecordError, match="claims"):
        compression.decompress(SNAPPY, raw)
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(raw)) + raw
    with pytest.raises(CorruptRecordError, match="claims"):
        compression.decompress(SNAPPY, xerial)


def test_snappy_bound_admits_the_most_compressible_input() -> None:
    zeros = b"\x00" * 1_000_000
    assert compression.decompress(SNAPPY, compression.compress(SNAPPY, zeros)) == zeros


@pytest.mark.parametrize("codec", COMPRESSED, ids=compression.CODEC_NAMES.get)
def test_output_is_bounded_and_a_bomb_is_corrupt(codec: int) -> None:
    limit = 1 << 20
    fits = bytes(range(256)) * (limit // 256)  # exactly the limit, hardly compressible
    assert compression.decompress(codec, compression.compress(codec, fits), limit=limit) == fits
    # Highly compressible data is grown into (the first guess is 8x the input).
    zeros = b"\0" * limit
    assert compression.decompress(codec, compression.compress(codec, zeros), limit=limit) == zeros
    with pytest.raises(CorruptRecordError, match="more than 1048576 bytes"):
        compression.decompress(codec, compression.compress(codec, zeros + b"\0"), limit=limit)


def _bomb(codec: int, mib: int) -> bytes:
    """``mib`` MiB of zeros compressed a chunk at a time (never held whole)."""
    import cramjam

    module = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}[codec]
    compressor = module.Compressor()
    chunk = b"\0" * (1 << 20)
    for _ in range(mib):
        compressor.compress(chunk)
    return bytes(compressor.finish())


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD], ids=compression.CODEC_NAMES.get)
def test_a_bomb_is_refused_without_expanding_it(codec: int) -> None:
    """A small frame that expands to 4x the default limit is refused, and decompressing it
    allocates at most about the limit (the high-water mark of the process shows it)."""
    import resource

    bomb = _bomb(codec, 4 * compression.MAX_DECOMPRESSED_BYTES >> 20)
    assert len(bomb) < 4 << 20
    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(CorruptRecordError, match="decompresses to more than"):
        compression.decompress(codec, bomb)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kib) / 1024
    assert grown_mib < 2.5 * (compression.MAX_DECOMPRESSED_BYTES >> 20)
