"""The murmur2 partitioner hashes and places keys exactly as Kafka's clients do."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from streamkit._core import partitioner
from streamkit._core.partitioner import murmur2, partition_for_key, to_positive

# org.apache.kafka.common.utils.UtilsTest#testMurmur2: Java's signed int results.
JAVA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
    (bytes([12, 42, 56, 24, 109, 111]), 274204207),
]


@pytest.mark.parametrize(("key", "expected"), JAVA_VECTORS)
def test_java_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@given(st.binary(max_size=64))
def test_matches_kafka_python(key: bytes) -> None:
    # kafka-python returns the same 32 bits unsigned.
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)
    assert -(2**31) <= murmur2(key) < 2**31


@given(st.binary(max_size=32), st.integers(min_value=1, max_value=1000))
def test_partition_is_kafka_pythons_default_partitioner(key: bytes, n: int) -> None:
    expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % n
    assert partition_for_key(key, n) == expected


def test_to_positive_and_bounds() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5
    assert partition_for_key(b"21", 1 << 31) == -973932308 & 0x7FFFFFFF
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def test_docstring_examples() -> None:
    assert doctest.testmod(partitioner).failed == 0
