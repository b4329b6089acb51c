"""The memory store under a join's access pattern: range reads per record on the task's
thread while the state manager applies a commit's changes in another thread."""

from __future__ import annotations

import threading

from streamkit.tables.store import MemoryStore


def test_range_reads_while_a_commit_is_applied_in_a_thread() -> None:
    store = MemoryStore()
    store.apply([(b"k%06d" % i, b"v") for i in range(0, 40_000, 2)], 1)
    done = threading.Event()
    errors: list[BaseException] = []

    def commits() -> None:
        try:
            for round_ in range(30):
                odd = [(b"k%06d" % i, b"w" if round_ % 2 == 0 else None) for i in range(1, 40_000, 2)]
                store.apply(odd, round_ + 2)
        except BaseException as exc:  # reported below, on the test thread
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=commits)
    thread.start()
    reads = 0
    try:
        while not done.is_set() or reads < 50:
            got = list(store.range(b"k010000", b"k030000"))
            # Even keys are always there; odd ones come and go a whole commit at a time.
            assert [k for k, _ in got if int(k[1:]) % 2 == 0] == [b"k%06d" % i for i in range(10_000, 30_000, 2)]
            assert [k for k, _ in got] == sorted(k for k, _ in got)
            reads += 1
    finally:
        thread.join()
    assert not errors
    assert [k for k, _ in store.items(b"k00000")] == [b"k000000", b"k000002", b"k000004", b"k000006", b"k000008"]
