"""``SortedPartition``'s range reads over many unstored writes, against a plain dict.

Writes wait in a sorted overlay (in chunks, so an insert does not move every key after it)
until the commit stores them in RocksDB; range reads merge the overlay with the store. With
thousands of keys written in random order, before and after a commit, with deletes, every
range read must give exactly the live keys of the range, in order: across chunk boundaries,
at them, and over ranges that hold nothing.
"""

from __future__ import annotations

import random
from pathlib import Path

from streamkit.tables.partition import SortedPartition
from streamkit.tables.store import RocksStore


def check_ranges(partition: SortedPartition, model: dict[bytes, bytes], rng: random.Random) -> None:
    keys = sorted(model)
    for _ in range(200):
        lo, hi = sorted(rng.randbytes(rng.choice((1, 2, 3))) for _ in range(2))
        expected = [(k, model[k]) for k in keys if lo <= k < hi]
        assert list(partition.range(lo, hi)) == expected, (lo, hi)
    for i in range(0, len(keys), 97):  # bounds on stored keys: lo is in, hi is out
        j = min(i + 1_500, len(keys) - 1)
        assert list(partition.range(keys[i], keys[j])) == [(k, model[k]) for k in keys[i:j]]
    assert list(partition.items()) == [(k, model[k]) for k in keys]


def test_range_reads_merge_thousands_of_unstored_writes_with_the_store(tmp_path: Path) -> None:
    rng = random.Random(7)
    store = RocksStore(str(tmp_path / "state"))
    partition = SortedPartition(0, store)
    model: dict[bytes, bytes] = {}
    offset = 0
    for round_ in range(3):
        for i in range(4_000):
            key = rng.randbytes(rng.choice((2, 3, 4)))
            if model and i % 5 == 0:  # delete a live key
                victim = rng.choice(sorted(model))
                partition.write(victim, None)
                del model[victim]
            partition.write(key, b"%d-%d" % (round_, i))
            model[key] = b"%d-%d" % (round_, i)
        check_ranges(partition, model, rng)  # overlay over the store
        changes = partition.take_changes()
        check_ranges(partition, model, rng)  # taken, not stored yet
        offset += len(changes)
        store.apply([(key, value) for key, value, _ts in changes], offset)
        partition.stored(changes)
        check_ranges(partition, model, rng)  # stored: the overlay is empty again
    store.close()
