"""The window aggregation driver against reference models of Kafka Streams' rules.

The models below use no streamkit code. Time windows and sessions keep every record that was
not late and, after each record, recompute every window from scratch: which windows exist,
which record ids fall in each, which are closed (and so emitted, in order of end, key, start)
and which are expired. Sliding windows are copied from one another in Kafka Streams, so no
function of the records gives them: their model is Kafka Streams' algorithm written out
plainly over a dict (``KStreamSlidingWindowAggregate``). The rules (Kafka Streams 4.4,
windows emitted on close by ``suppress(untilWindowCloses)``, cache off):

* time windows ``[start, end)``, aligned to 0, ``start >= 0``: a record goes to the windows
  still open (``stream time < end + grace``, ``KStreamWindowAggregate.process``); none open:
  late; a window is emitted once stream time reaches ``end + grace`` (suppress emits when
  ``end <= stream time - grace``);
* sessions: a record merges with every session of its key it reaches (end >= ts - gap,
  start <= ts + gap) that the session store still returns: its retention is gap + grace from
  the end, counted from the store's time, the stream time before the record
  (``AbstractRocksDBSegmentedBytesStore.getActualFrom``); a record is late when its merged
  session ends before ``stream time - gap - grace``
  (``KStreamSessionWindowAggregate.process``); a session is emitted once
  ``stream time >= end + gap + grace`` (suppress' grace for sessions is gap + grace), and
  again whenever it is written after that (a session made closed);
* sliding windows: see ``model_sliding``; a window is emitted once
  ``stream time >= end + grace`` and again each time a record changes it after that.

Each window's value in the driver is the sorted list of the ids of the records it aggregated,
so equality with the model checks exact membership, not just a count.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamkit.windows import Aggregation, Hopping, Session, Sliding, Tumbling, run

Ids = list[int]
Record = tuple[bytes, int]  # key, timestamp
Window = tuple[bytes, int, int]  # key, start, end


def ms(value: int) -> timedelta:
    return timedelta(milliseconds=value)


# -- reference models ------------------------------------------------------------------------


class Model:
    """What every model reports."""

    def __init__(self) -> None:
        self.late: list[tuple[int, str]] = []  # (record id, reason)
        self.closes: list[tuple[bytes, int, int, Ids]] = []
        self.final: dict[Window, Ids] = {}


def emit_closed(
    model: Model, windows: dict[Window, Ids], closed: list[Window], emitted: set[Window]
) -> None:
    newly = [w for w in closed if w not in emitted]
    for key, start, end in sorted(newly, key=lambda w: (w[2], w[0], w[1])):
        emitted.add((key, start, end))
        model.closes.append((key, start, end, sorted(windows[(key, start, end)])))


def model_time(size: int, step: int, grace: int, records: list[Record]) -> Model:
    model = Model()
    now = -1
    windows: dict[Window, Ids] = {}
    emitted: set[Window] = set()
    for i, (key, ts) in enumerate(records):
        if ts < 0:
            model.late.append((i, "negative-timestamp"))
            continue
        now = max(now, ts)
        starts = [s for s in range(0, ts + 1, step) if s <= ts < s + size]
        open_starts = [s for s in starts if now < s + size + grace]
        if not open_starts:
            model.late.append((i, "window-closed"))
        for s in open_starts:
            windows.setdefault((key, s, s + size), []).append(i)
        emit_closed(model, windows, [w for w in windows if now >= w[2] + grace], emitted)
    model.final = {w: sorted(ids) for w, ids in windows.items() if now < w[2] + grace}
    return model


def emit_changed(
    model: Model, windows: dict[Window, Ids], closed: list[Window], emitted: dict[Window, Ids]
) -> None:
    """Suppress' eviction: each closed window whose value it has not emitted yet."""
    newly = [w for w in closed if emitted.get(w) != windows[w]]
    for key, start, end in sorted(newly, key=lambda w: (w[2], w[0], w[1])):
        emitted[(key, start, end)] = windows[(key, start, end)]
        model.closes.append((key, start, end, sorted(windows[(key, start, end)])))


def model_session(gap: int, grace: int, records: list[Record]) -> Model:
    model = Model()
    now = -1
    sessions: dict[bytes, list[tuple[int, int, Ids]]] = {}
    emitted: dict[Window, Ids] = {}

    def closed(end: int, at: int) -> bool:
        # Emitted by suppress (end <= st - gap - grace), hidden by the store's retention.
        return at >= end + gap + grace

    def all_sessions() -> dict[Window, Ids]:
        return {(k, s, e): sorted(ids) for k, ss in sessions.items() for s, e, ids in ss}

    for i, (key, ts) in enumerate(records):
        if ts < 0:
            model.late.append((i, "negative-timestamp"))
            continue
        before, now = now, max(now, ts)
        mine = sessions.setdefault(key, [])
        touched = [
            s for s in mine if s[1] >= ts - gap and s[0] <= ts + gap and not closed(s[1], before)
        ]
        start = min([ts] + [s[0] for s in touched])
        end = max([ts] + [s[1] for s in touched])
        if end < now - gap - grace:
            model.late.append((i, "window-closed"))
        else:
            ids = [i] + [j for s in touched for j in s[2]]
            sessions[key] = [s for s in mine if s not in touched] + [(start, end, ids)]
            if closed(end, now):  # made closed: emitted at once (below), then forgotten
                model.closes.append((key, start, end, sorted(ids)))
                emitted[(key, start, end)] = sorted(ids)
        current = all_sessions()
        emit_changed(model, current, [w for w in current if closed(w[2], now)], emitted)
        for k in sessions:
            sessions[k] = [s for s in sessions[k] if not closed(s[1], now)]
    model.final = all_sessions()
    return model


def model_sliding(d: int, grace: int, records: list[Record]) -> Model:
    """KStreamSlidingWindowAggregate (processReverse, processEarly, createWindows) over a dict
    of windows per key, and suppress(untilWindowCloses) over its writes, in their order."""
    model = Model()
    now = -1
    retention = 2 * d + grace  # SlidingWindowStoreMaterializer's default retention
    store_time = -1  # the window store's: the largest window start written
    windows: dict[bytes, dict[int, tuple[Ids, int]]] = {}  # key -> start -> (ids, max_ts)
    buffer: dict[Window, Ids] = {}  # suppress' buffer: written, not yet emitted

    def evict(at: int) -> None:
        # KTableSuppressProcessor: evict while the buffer's smallest end <= st - grace.
        for w in sorted(buffer, key=lambda w: (w[2], w[0], w[1])):
            if w[2] <= at - grace:
                model.closes.append((*w, sorted(buffer.pop(w))))

    for i, (key, ts) in enumerate(records):
        if ts < 0:
            model.late.append((i, "negative-timestamp"))
            continue
        now = max(now, ts)
        close = now - grace
        if ts + d < close:  # KStreamSlidingWindowAggregate.process: every window closed
            model.late.append((i, "window-closed"))
            continue
        mine = windows.setdefault(key, {})
        lo = max(0, ts - 2 * d if ts >= d else 0, store_time - retention + 1)  # getActualFrom
        seen = sorted(s for s in mine if lo <= s <= ts + 1)
        read = {s: mine[s] for s in seen}  # values before this record's writes
        writes: list[tuple[int, Ids, int]] = []  # (start, ids, max_ts), in Kafka's order

        def add(
            start: int, base: tuple[Ids, int] | None,
            i: int = i, ts: int = ts, close: int = close, writes: list[tuple[int, Ids, int]] = writes,
        ) -> None:
            # updateWindowAndForward: only into an open window.
            if start + d >= close:
                ids, max_ts = base if base is not None else ([], ts)
                writes.append((start, sorted([*ids, i]), max(max_ts, ts)))

        if ts < d:  # processEarly
            combined = read.get(0)
            previous = combined[1] if combined is not None and combined[1] < ts else None
            right = None
            right_exists = ts + 1 in read
            for s in seen:
                if 0 < s <= ts:
                    right = read[s]
                    add(s, read[s])
            if right is None and combined is not None and combined[1] > ts:
                right = combined
            if not right_exists and right is not None and right[1] > ts:
                writes.append((ts + 1, right[0], right[1]))
            if previous is not None and previous + 1 not in read:
                add(previous + 1, None)
            add(0, combined)
        else:  # processReverse, then createWindows
            right = left = previous = None
            left_exists = right_exists = done = False
            looked: set[int] = set()
            for s in reversed(seen):
                looked.add(s)
                if s == ts + 1:
                    right_exists = True
                elif s + d > ts:
                    right = right or read[s]
                    add(s, read[s])
                elif s + d == ts:
                    left_exists = True
                    add(s, read[s])
                    if read[s][1] >= ts:
                        done = True
                        break
                    previous = read[s][1]
                else:
                    left, previous = read[s], read[s][1]
                    break
            if not done:
                if previous is not None and previous + 1 not in looked and previous + 1 + d >= ts:
                    add(previous + 1, None)
                if not left_exists:
                    seed = left if previous is not None and ts - d <= previous else None
                    add(ts - d, (seed[0], ts) if seed is not None else None)
                if not right_exists and right is not None and right[1] > ts:
                    writes.append((ts + 1, right[0], right[1]))
        for start, ids, max_ts in writes:
            mine[start] = (ids, max_ts)
            store_time = max(store_time, start)
            buffer[(key, start, start + d)] = ids
            evict(now)
        for k in windows:  # the store hides (and the driver deletes) windows past retention
            windows[k] = {s: v for s, v in windows[k].items() if s > store_time - retention}
    model.final = {(k, s, s + d): sorted(v[0]) for k, ws in windows.items() for s, v in ws.items()}
    return model


# -- the driver, aggregating record ids ------------------------------------------------------

IDS: Aggregation[int, list[int]] = Aggregation(
    initializer=list,
    adder=lambda ids, i: sorted([*ids, i]),
    serialize=lambda ids: json.dumps(ids).encode(),
    deserialize=json.loads,
    merger=lambda a, b: sorted(a + b),
)


def check_against(spec: Any, model: Model, records: list[Record]) -> None:
    inputs = [(key, ts, i) for i, (key, ts) in enumerate(records)]
    closing = run(spec, IDS, inputs, emit="close")
    updating = run(spec, IDS, inputs, emit="update")
    for result in (closing, updating):
        assert [(late.value, late.reason) for late in result.late] == model.late
        assert {(w.key, w.start_ms, w.end_ms): w.value for w in result.windows} == model.final
    assert [(w.key, w.start_ms, w.end_ms, w.value) for w in closing.emitted] == model.closes
    # emit="update": the last update of each window is its final value (None: merged away).
    last: dict[Window, Ids | None] = {}
    for w in updating.emitted:
        last[(w.key, w.start_ms, w.end_ms)] = w.value
    for window, ids in model.final.items():
        assert last[window] == ids
    closed_values = {(k, s, e): ids for k, s, e, ids in model.closes}
    for window, value in last.items():
        if window not in model.final:
            assert value is None or closed_values.get(window) == value


# -- inputs ----------------------------------------------------------------------------------

KEYS = st.sampled_from([b"a", b"b", b"a\x00", b""])


@st.composite
def record_lists(draw: st.DrawFn) -> list[Record]:
    """Random, out-of-order, late and duplicate timestamps; sometimes a drifting clock."""
    n = draw(st.integers(0, 40))
    if draw(st.booleans()):
        times = draw(st.lists(st.integers(-2, 80), min_size=n, max_size=n))
    else:
        times, t = [], 0
        for _ in range(n):
            t += draw(st.integers(0, 6))
            times.append(max(-1, t - draw(st.integers(0, 25))))
    return [(draw(KEYS), ts) for ts in times]


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    size=st.integers(1, 20),
    grace=st.integers(0, 12),
    records=record_lists(),
)
def test_tumbling_matches_model(size: int, grace: int, records: list[Record]) -> None:
    spec = Tumbling(ms(size), grace=ms(grace))
    check_against(spec, model_time(size, size, grace, records), records)


@SETTINGS
@given(
    size=st.integers(1, 20),
    step_fraction=st.integers(1, 20),
    grace=st.integers(0, 12),
    records=record_lists(),
)
def test_hopping_matches_model(
    size: int, step_fraction: int, grace: int, records: list[Record]
) -> None:
    step = max(1, size * step_fraction // 20)
    spec = Hopping(ms(size), ms(step), grace=ms(grace))
    check_against(spec, model_time(size, step, grace, records), records)


@SETTINGS
@given(gap=st.integers(1, 12), grace=st.integers(0, 12), records=record_lists())
def test_session_matches_model(gap: int, grace: int, records: list[Record]) -> None:
    spec = Session(ms(gap), grace=ms(grace))
    check_against(spec, model_session(gap, grace, records), records)


@SETTINGS
@given(d=st.integers(0, 15), grace=st.integers(0, 12), records=record_lists())
def test_sliding_matches_model(d: int, grace: int, records: list[Record]) -> None:
    spec = Sliding(ms(d), grace=ms(grace))
    check_against(spec, model_sliding(d, grace, records), records)
