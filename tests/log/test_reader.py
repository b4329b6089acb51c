"""log.reader's batches as views into the segments' mappings (the Spark data source's read)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamkit.log.manager import LogManager
from streamkit.log.reader import CorruptSegmentError, list_segments, read_batches
from streamkit.log.records import NewRecord


def _topic(data: Path) -> None:
    """Topic ``t``: 40 batches of 5 records, over several segments."""
    with LogManager(data, background=False) as log:
        log.create_topic("t", 1, {"segment.bytes": "2000"})
        part = log.partition("t", 0)
        for b in range(40):
            part.append_records([NewRecord(b"k%d" % i, b"v" * (b + i), 1_000 + i) for i in range(5)])
        part.flush()


def test_views_are_the_batches_copies_are(tmp_path: Path) -> None:
    _topic(tmp_path)
    assert len(list_segments(tmp_path, "t", 0)) > 2
    copies = [(h.base_offset, bytes(d)) for h, d in read_batches(tmp_path, "t", 0, 7, 180)]
    views = [(h.base_offset, bytes(d)) for h, d in read_batches(tmp_path, "t", 0, 7, 180, views=True)]
    assert views == copies and len(copies) == 35  # the batches holding offsets 7..179: 5..9 to 175..179


def test_a_view_is_released_when_the_next_batch_is_asked_for(tmp_path: Path) -> None:
    _topic(tmp_path)
    held = []
    for _header, data in read_batches(tmp_path, "t", 0, 0, views=True):
        if held:
            with pytest.raises(ValueError):  # the previous one: released, its mapping may close
                bytes(held[-1])
        held.append(data)
    assert len(held) == 40  # every segment's mapping closed although the views are still referenced


def test_a_corrupt_batch_is_reported_under_views_too(tmp_path: Path) -> None:
    _topic(tmp_path)
    first = list_segments(tmp_path, "t", 0)[0].path
    raw = bytearray(first.read_bytes())
    raw[100] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    first.write_bytes(bytes(raw))
    with pytest.raises(CorruptSegmentError, match="CRC mismatch"):
        for _header, _data in read_batches(tmp_path, "t", 0, 0, views=True):
            pass
