"""Window keys in a sorted store: byte order is (key, start, end) order; ranges are exact."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamkit.windows import decode_window_key, encode_window_key, window_range
from streamkit.windows.keys import MAX_MS, MIN_MS

# Keys rich in the bytes the escaping is about, so prefixes and 0x00/0x01/0xff collide often.
KEYS = st.binary(max_size=6) | st.lists(
    st.sampled_from([b"\x00", b"\x01", b"\xff", b"a"]), max_size=5
).map(b"".join)
TIMES = st.integers(MIN_MS, MAX_MS) | st.integers(-3, 3)
WINDOWS = st.tuples(KEYS, TIMES, TIMES)


@given(WINDOWS)
def test_round_trip(window: tuple[bytes, int, int]) -> None:
    assert decode_window_key(encode_window_key(*window)) == window


@settings(max_examples=500)
@given(WINDOWS, WINDOWS)
def test_byte_order_is_key_start_end_order(
    a: tuple[bytes, int, int], b: tuple[bytes, int, int]
) -> None:
    ea, eb = encode_window_key(*a), encode_window_key(*b)
    assert (ea < eb) == (a < b)
    assert (ea == eb) == (a == b)


@settings(max_examples=300)
@given(st.lists(WINDOWS, max_size=30), KEYS, TIMES, TIMES)
def test_range_holds_exactly_one_keys_windows_between_two_starts(
    windows: list[tuple[bytes, int, int]], key: bytes, lo: int, hi: int
) -> None:
    windows += [(key, lo, lo), (key, hi, hi), (key + b"\x00", lo, hi)]
    encoded = sorted(encode_window_key(*w) for w in set(windows))
    lo_bytes, hi_bytes = window_range(key, lo, hi)
    inside = [decode_window_key(e) for e in encoded if lo_bytes <= e < hi_bytes]
    expected = sorted(w for w in set(windows) if w[0] == key and lo <= w[1] <= hi)
    assert inside == expected


def test_windows_of_one_key_are_contiguous_and_ordered_by_start() -> None:
    keys = [b"", b"a", b"a\x00", b"a\x00b", b"a\x01", b"ab", b"b"]
    encoded = sorted(
        encode_window_key(k, start, start + 10) for k in keys for start in (-5, 0, 7, 1000)
    )
    decoded = [decode_window_key(e) for e in encoded]
    assert [k for k, _s, _e in decoded] == [k for k in sorted(keys) for _ in range(4)]
    assert [s for k, s, _e in decoded if k == b"a\x00"] == [-5, 0, 7, 1000]


def test_decode_rejects_what_is_not_a_window_key() -> None:
    with pytest.raises(ValueError, match="not a window key"):
        decode_window_key(b"short")
    with pytest.raises(ValueError, match="does not fit in 64 bits"):
        encode_window_key(b"k", MAX_MS + 1, 0)
