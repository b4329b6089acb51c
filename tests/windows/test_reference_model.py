"""The window aggregation driver against brute-force reference models.

The models below use no streamkit code. They keep every record that was not late and, after
each record, recompute every window from scratch: which windows exist, which record ids fall
in each, which are closed (and so emitted once, in order of end, key, start) and which are
expired. The rules they encode are the documented ones (Kafka Streams 3.x):

* time windows ``[start, end)``, aligned to 0, ``start >= 0``: a record goes to the windows
  still open (``stream time < end + grace``); none open: late;
* sessions: a record merges with every open session of its key it reaches (end >= ts - gap,
  start <= ts + gap); a session is closed (final, never merged again) when
  ``stream time > end + gap + grace``; a record is late when its merged session is closed;
* sliding windows ``[start, start + d]``: for each accepted record ``t`` the window
  ``[t - d, t]`` (``[0, d]`` if ``t < d``) and, if an accepted record lies in
  ``(t, t + 1 + d]``, the window ``[t + 1, t + 1 + d]``; closed when
  ``stream time > end + grace``; a record is late when its left window is closed.

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


def model_session(gap: int, grace: int, records: list[Record]) -> Model:
    model = Model()
    now = -1
    sessions: dict[bytes, list[tuple[int, int, Ids]]] = {}
    emitted: set[Window] = set()

    def closed(end: int) -> bool:
        return now > end + gap + grace

    def all_sessions() -> dict[Window, Ids]:
        return {(k, s, e): sorted(ids) for k, ss in sessions.items() for s, e, ids in ss}

    for i, (key, ts) in enumerate(records):
        if ts < 0:
            model.late.append((i, "negative-timestamp"))
            continue
        now = max(now, ts)
        mine = sessions.setdefault(key, [])
        touched = [
            s for s in mine if s[1] >= ts - gap and s[0] <= ts + gap and not closed(s[1])
        ]
        start = min([ts] + [s[0] for s in touched])
        end = max([ts] + [s[1] for s in touched])
        if closed(end):
            model.late.append((i, "window-closed"))
        else:
            ids = [i] + [j for s in touched for j in s[2]]
            sessions[key] = [s for s in mine if s not in touched] + [(start, end, ids)]
        current = all_sessions()
        emit_closed(model, current, [w for w in current if closed(w[2])], emitted)
    model.final = {w: ids for w, ids in all_sessions().items() if not closed(w[2])}
    return model


def model_sliding(d: int, grace: int, records: list[Record]) -> Model:
    model = Model()
    now = -1
    accepted: dict[bytes, list[tuple[int, int]]] = {}
    emitted: set[Window] = set()

    def all_windows() -> dict[Window, Ids]:
        windows: dict[Window, Ids] = {}
        for key, recs in accepted.items():
            times = [t for t, _i in recs]
            bounds = set()
            for t in times:
                bounds.add((t - d, t) if t >= d else (0, d))
                if any(t < a <= t + 1 + d for a in times):
                    bounds.add((t + 1, t + 1 + d))
            for start, end in bounds:
                windows[(key, start, end)] = sorted(i for t, i in recs if start <= t <= end)
        return windows

    for i, (key, ts) in enumerate(records):
        if ts < 0:
            model.late.append((i, "negative-timestamp"))
            continue
        now = max(now, ts)
        left_end = ts if ts >= d else d
        if now > left_end + grace:
            model.late.append((i, "window-closed"))
        else:
            accepted.setdefault(key, []).append((ts, i))
        windows = all_windows()
        emit_closed(model, windows, [w for w in windows if now > w[2] + grace], emitted)
    model.final = {w: ids for w, ids in all_windows().items() if w[2] >= now - d - grace}
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
