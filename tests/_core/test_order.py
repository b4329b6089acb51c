"""``stream_time_order``: what one repartition partition receives when the upstream tasks hand
out their source partitions' records in ``task_order`` (``heapq.merge`` by timestamp) is that
merge restricted to the partition's records, and sorting them by their source partition's
stream time (over the whole partition) gives exactly that."""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from streamkit._core.order import stream_time_order, stream_times, task_order

# A record of an input: (timestamp, the repartition partition it goes to). Few distinct
# timestamps and negative ones: ties and out-of-order records are common.
_record = st.tuples(st.integers(-5, 12), st.integers(0, 2))
_inputs = st.lists(st.lists(_record, max_size=12), min_size=1, max_size=5)


@settings(max_examples=500, deadline=None)
@given(inputs=_inputs)
def test_each_partition_gets_the_whole_merge_restricted_to_its_records(
    inputs: list[list[tuple[int, int]]],
) -> None:
    # Each record named (input, position, timestamp, destination).
    named = [[(i, n, ts, to) for n, (ts, to) in enumerate(records)] for i, records in enumerate(inputs)]
    merged = list(heapq.merge(*named, key=lambda r: r[2]))
    assert merged == list(task_order(named, timestamp=lambda r: r[2]))
    times = [stream_times([ts for ts, _to in records]) for records in inputs]
    for to in range(3):
        expected = [r for r in merged if r[3] == to]
        # the partition's records as they come in any other order (here reversed)
        received = [r for records in reversed(named) for r in reversed(records) if r[3] == to]
        got = stream_time_order(received, key=lambda r: (times[r[0]][r[1]], r[0], r[1]))
        assert got == expected


@settings(max_examples=300, deadline=None)
@given(timestamps=st.lists(st.integers(-5, 12), max_size=20), cut=st.integers(0, 20))
def test_stream_times_carry_on_from_the_stream_time_before(timestamps: list[int], cut: int) -> None:
    """A piece of an input read on its own (a split of a partition, a backfill that starts
    mid-partition) gets the stream times of the whole input, given the stream time before it."""
    whole = stream_times(timestamps)
    assert whole == [max(timestamps[: n + 1]) for n in range(len(timestamps))]
    before = max(timestamps[:cut]) if timestamps[:cut] else None
    assert stream_times(timestamps[cut:], before=before) == whole[cut:]


def test_the_example_of_issue_22() -> None:
    """Source partition 0 = [ts 10 (to A), ts 1 (to B)], 1 = [ts 5 (to B)]: B takes p1's
    record first, as the whole merge p1@5, p0@10, p0@1 has it (not p0@1 first)."""
    times = [stream_times([10, 1]), stream_times([5])]
    b = [(0, 1), (1, 0)]  # (source partition, offset)
    assert stream_time_order(b, key=lambda r: (times[r[0]][r[1]], r[0], r[1])) == [(1, 0), (0, 1)]
    assert list(task_order([[(0, 1, 1)], [(1, 0, 5)]], timestamp=lambda r: r[2])) == [(0, 1, 1), (1, 0, 5)]
