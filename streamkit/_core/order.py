"""The order a task takes the records of several inputs (the partitions of merged topics, the
two sides of a join, a repartition topic's writers), spelled once.

Each input is taken in its own order (offsets); the next record is always the one with the
lowest timestamp among the inputs' next ones, and on a tie the one of the input listed first:
Kafka Streams' choice of a task's next record. The worker makes this choice online, as records
arrive (``runtime/inbox.py``; ``tests/runtime/test_inbox_merge.py`` holds it to this function);
the Spark backfill, which holds every record, calls this function.

    >>> left, right = [(0, "a"), (5, "b")], [(0, "x"), (3, "y")]
    >>> [value for _ts, value in task_order([left, right], timestamp=lambda r: r[0])]
    ['a', 'x', 'y', 'b']

Behind a repartition, the same order decides what each repartition partition receives: the
upstream tasks of a worker with ``max_task_drift_ms=0`` hand out the records of all the source
partitions feeding the topic in ``task_order`` of those whole partitions, and each repartition
partition receives the part of that order that is its own. ``stream_time_order`` gives that part
from the records alone: ``task_order`` of the inputs equals sorting every record by (its
input's *stream time* at it: the largest timestamp of that input up to and including it, the
input's index, its position in the input), so any subset of the records comes in that order
too, provided each record's stream time was taken over its *whole* input (``stream_times``),
not over the subset.

    >>> p0, p1 = [10, 1], [5]  # two source partitions' timestamps, in offset order
    >>> stream_times(p0), stream_times(p1)
    ([10, 10], [5])
    >>> # p0's second record (ts 1) and p1's (ts 5) go to one repartition partition:
    >>> times = [stream_times(p0), stream_times(p1)]
    >>> stream_time_order([(0, 1), (1, 0)], key=lambda r: (times[r[0]][r[1]], r[0], r[1]))
    [(1, 0), (0, 1)]

(The whole merge is p1@5, p0@10, p0@1: p0's record at ts 1 waits behind the one at 10.)
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import accumulate
from typing import TypeVar

T = TypeVar("T")


def task_order(inputs: Sequence[Iterable[T]], timestamp: Callable[[T], int]) -> Iterator[T]:
    """The records of ``inputs`` (each in its own order) in a task's order."""
    if len(inputs) == 1:
        return iter(inputs[0])
    return heapq.merge(*inputs, key=timestamp)  # ties: the input listed first (heapq.merge is stable)


def stream_times(timestamps: Iterable[int], before: int | None = None) -> list[int]:
    """An input's stream time at each of its records (``timestamps`` in the input's order): the
    largest timestamp up to and including the record's, and ``before``, the input's stream time
    before the first of them (what a task restores from its last commit; None: no record).

    >>> stream_times([3, 1, 4, 1, 5], before=2), stream_times([3, 1], before=7)
    ([3, 3, 4, 4, 5], [7, 7])
    """
    if before is None:
        return list(accumulate(timestamps, max))
    return list(accumulate(timestamps, max, initial=before))[1:]


def stream_time_order(records: Iterable[T], key: Callable[[T], tuple[int, ...]]) -> list[T]:
    """``records``, some records of several inputs, in the order ``task_order`` takes them
    among all the inputs' records. ``key(record)`` is (its input's stream time at it, taken over
    the whole input by ``stream_times``; the input's index in ``task_order``'s list; its
    position in the input, as one or more ints). The sort is stable: records of one key (a
    flat map's outputs of one source record) keep their order."""
    return sorted(records, key=key)
