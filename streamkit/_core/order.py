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
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def task_order(inputs: Sequence[Iterable[T]], timestamp: Callable[[T], int]) -> Iterator[T]:
    """The records of ``inputs`` (each in its own order) in a task's order."""
    if len(inputs) == 1:
        return iter(inputs[0])
    return heapq.merge(*inputs, key=timestamp)  # ties: the input listed first (heapq.merge is stable)
