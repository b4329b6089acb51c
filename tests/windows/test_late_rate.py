"""Visible lateness (issue 22): every windowed table kind counts its late records by reason, and
a jump of a table's late rate is logged once a minute at most, naming the grace, how far behind
stream time the late records were and the likely cause; ``/status`` and ``/metrics`` show it.

The integration tests run a real worker (``AppDriver``: the real runtime on an embedded log,
with a manual clock) over inputs whose late records a simple model gives: stream time is the
largest timestamp so far, a tumbling window ``[start, end)`` closes when stream time reaches
``end + grace``.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

import streamkit as sk
from streamkit.testing import AppDriver
from streamkit.web import WebServer
from streamkit.windows import Hopping, Session, Sliding, Tumbling, WindowSpec
from streamkit.windows.lateness import LateCounter, LateInterval, likely_cause, warning_text
from streamkit.windows.wtable import late_counts, late_rates

BASE = 1_700_000_000_000  # a multiple of every window size used here
LOGGER = "streamkit.windows.lateness"
SIZE_MS, GRACE_MS = 10_000, 1_000


def _phase(first: int, count: int, late_every: tuple[int, ...], behind: Callable[[int], int]) -> list[int]:
    """Timestamps (ms after BASE) of records ``first .. first + count - 1``: record ``i`` at
    ``i * 100`` ms, except those with ``i % 10`` in ``late_every``, ``behind(i)`` ms earlier."""
    return [i * 100 - (behind(i) if i % 10 in late_every else 0) for i in range(first, first + count)]


def _model(timestamps: list[int], grace_ms: int) -> list[tuple[int, bool, int]]:
    """Per record of a tumbling ``SIZE_MS`` window table: (timestamp, late, stream time - ts)."""
    out: list[tuple[int, bool, int]] = []
    stream_time: int | None = None  # no record yet
    for ts in timestamps:
        if stream_time is None:
            out.append((ts, False, 0))
            stream_time = ts
            continue
        end = ts // SIZE_MS * SIZE_MS + SIZE_MS
        out.append((ts, stream_time >= end + grace_ms, stream_time - ts))
        stream_time = max(stream_time, ts)
    return out


def _expected_interval(model: list[tuple[int, bool, int]], before: list[tuple[int, bool, int]]) -> LateInterval:
    behind = [b for _, late, b in model if late]
    before_late = sum(1 for _, late, _ in before if late)
    return LateInterval(
        len(model), len(behind), before_late / len(before) if before else 0.0,
        statistics.median_low(behind) if behind else 0, max(behind, default=0),
    )


def _app(name: str, grace_ms: int, **settings: Any) -> tuple[sk.App, sk.Topic, Any]:
    app = sk.App(name, **settings)
    views = app.topic("views", key_type=str, value_type=dict, partitions=1)
    table = app.stream(views).group_by_key().window(Tumbling(SIZE_MS / 1000, grace=grace_ms / 1000)).count("per_10s")
    return app, views, table


async def _send(driver: AppDriver, topic: sk.Topic, timestamps: list[int]) -> None:
    for ts in timestamps:
        topic.send_soon(key="k", value={"ts": ts}, timestamp=BASE + ts)
    await driver.process(timeout=60)


async def _status(web: WebServer) -> tuple[dict[str, Any], str]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{web.url}/status") as r:
            status = await r.json()
        async with http.get(f"{web.url}/metrics") as r:
            metrics = await r.text()
    return status, metrics


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


async def test_a_jump_of_the_late_rate_is_warned_once_a_minute_with_grace_lateness_and_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, views, table = _app("late-rate", GRACE_MS)
    # 1000 records in order; then 1000 with every tenth 19.9 to 28.9 s behind stream time;
    # then twice 1000 with four in ten behind (the first within the minute of the warning).
    phases = [
        _phase(0, 1000, (), lambda i: 0),
        _phase(1000, 1000, (0,), lambda i: 20_000 + i % 100 * 100),
        _phase(2000, 1000, (0, 3, 5, 7), lambda i: 15_000 + i % 7 * 1000),
        _phase(3000, 1000, (0, 3, 5, 7), lambda i: 15_000 + i % 7 * 1000),
    ]
    model = _model([ts for phase in phases for ts in phase], GRACE_MS)
    parts = [model[:1000], model[1000:2000], model[2000:3000], model[3000:]]
    expected = [_expected_interval(part, model[: 1000 * n]) for n, part in enumerate(parts)]
    # What the input implies (the model's answer, written out so the model is checked too).
    assert [(e.late, e.fraction) for e in expected] == [(0, 0.0), (100, 0.1), (400, 0.4), (400, 0.4)]
    assert (expected[1].median_behind_ms, expected[1].max_behind_ms) == (23_900, 28_900)
    assert expected[2].before_fraction == 0.05 and expected[3].before_fraction == pytest.approx(500 / 3000)
    first_warning = (
        "table 'per_10s': 10.0% of its last 1000 records were late (100 records, 0.0% before), "
        "23.9 s (median) and 28.9 s (max) behind stream time, grace 1 s. Likely cause: the input's "
        "disorder exceeds the grace (records up to 28.9 s behind stream time, grace 1 s): a grace of "
        "at least 28.9 s keeps such records"
    )
    caplog.set_level(logging.WARNING, logger=LOGGER)
    async with AppDriver(app) as driver, WebServer(driver.worker, port=0) as web:
        await _send(driver, views, phases[0])
        assert _warnings(caplog) == []
        await _send(driver, views, phases[1])
        assert _warnings(caplog) == [first_warning]  # once, not once per late record
        warned_at = driver.clock.now_ms()
        await _send(driver, views, phases[2])  # a jump again (40% > 2 x 5%), within the minute
        assert _warnings(caplog) == [first_warning]
        status, metrics = await _status(web)
        rate = status["late_rate"]["per_10s"]
        assert rate == {
            "records": 3000, "interval_records": 1000, "interval_late": 400, "interval_fraction": 0.4,
            "before_fraction": 0.05, "interval_median_behind_ms": expected[2].median_behind_ms,
            "interval_max_behind_ms": expected[2].max_behind_ms, "grace_ms": GRACE_MS, "warnings": 1,
            "last_warning": first_warning, "last_warning_ms": warned_at,
        }
        assert status["late_records"] == {"per_10s": {"window-closed": 500}}  # the shape it had
        assert 'streamkit_late_fraction{app="late-rate",table="per_10s"} 0.4' in metrics
        await driver.advance(61)
        await _send(driver, views, phases[3])  # 40% > 2 x 16.7%: a jump, a minute later
        warnings = _warnings(caplog)
        assert len(warnings) == 2 and warnings[1] == warning_text(
            "per_10s", expected[3], GRACE_MS, likely_cause(expected[3], GRACE_MS, 0, False)
        )
        assert warnings[1].startswith("table 'per_10s': 40.0% of its last 1000 records were late (400 records, 16.7% before)")
        status, _ = await _status(web)
        assert status["late_rate"]["per_10s"]["last_warning_ms"] == warned_at + 61_000
        late = await driver.read(app.topics["late-rate-late"])
    assert len(late) == sum(e.late for e in expected) == 900
    assert table.table.late.by_reason == {"window-closed": 900}


async def test_disorder_within_the_grace_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    app, views, _table = _app("late-rate-calm", GRACE_MS)
    timestamps = _phase(0, 3000, (0, 5), lambda i: 900)  # a fifth of the records 1 s behind: kept
    assert not any(late for _, late, _ in _model(timestamps, GRACE_MS))
    caplog.set_level(logging.WARNING, logger=LOGGER)
    async with AppDriver(app) as driver, WebServer(driver.worker, port=0) as web:
        await _send(driver, views, timestamps)
        status, metrics = await _status(web)
    assert _warnings(caplog) == []
    rate = status["late_rate"]["per_10s"]
    assert (rate["records"], rate["interval_late"], rate["interval_fraction"], rate["warnings"]) == (3000, 0, 0.0, 0)
    assert rate["last_warning"] is None
    assert status["late_records"] == {"per_10s": {}}
    assert 'streamkit_late_fraction{app="late-rate-calm",table="per_10s"} 0' in metrics


async def test_a_re_keyed_table_without_alignment_names_the_drift_setting(caplog: pytest.LogCaptureFixture) -> None:
    app = sk.App("late-rekeyed", max_task_drift_ms=None)
    views = app.topic("views", key_type=str, value_type=dict, partitions=1)
    app.stream(views).group_by(lambda v: "all", name="all").window(Tumbling(10, grace=1)).count("per_10s")
    timestamps = _phase(0, 1000, (0, 1), lambda i: 30_000)
    late = sum(1 for _, is_late, _ in _model(timestamps, GRACE_MS) if is_late)
    assert late == 198  # all of those but the first two (30 s behind no earlier record)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    async with AppDriver(app) as driver:
        await _send(driver, views, timestamps)
    [warning] = _warnings(caplog)
    assert warning.startswith(f"table 'per_10s': {late / 10:.1f}% of its last 1000 records were late ({late} records")
    assert warning.endswith(
        "Likely cause: tasks run ahead of each other (max_task_drift_ms=None): set max_task_drift_ms to at "
        "most the grace (1000) so that no task feeding the table runs further ahead in event time than the "
        "grace allows"
    )


def test_the_likely_cause_follows_alignment_repartitioning_and_grace() -> None:
    interval = LateInterval(1000, 50, 0.0, 3_000, 12_000)
    ahead, disorder = "tasks run ahead of each other", "the input's disorder exceeds the grace"
    assert likely_cause(interval, 2_000, None, True).startswith(f"{ahead} (max_task_drift_ms=None)")
    assert likely_cause(interval, 2_000, 5_000, False).startswith(f"{ahead} (max_task_drift_ms=5000)")
    assert likely_cause(interval, 2_000, None, False).startswith(disorder)  # nothing re-keyed: no tasks ahead
    assert likely_cause(interval, 2_000, 2_000, True).startswith(disorder)  # aligned within the grace
    assert "(records up to 12 s behind stream time, grace 2 s)" in likely_cause(interval, 2_000, 0, True)


@pytest.mark.parametrize(
    ("fraction_late", "before", "jumped"),
    [(11, 0.0, True), (10, 0.0, False), (50, 0.02, True), (50, 0.025, False), (999, 0.6, False)],
)
def test_a_jump_is_a_late_fraction_above_one_percent_and_twice_the_one_before(
    fraction_late: int, before: float, jumped: bool
) -> None:
    assert LateInterval(1000, fraction_late, before, 1, 1).jumped() is jumped


def test_intervals_are_counted_in_records_and_only_timing_reasons_make_them_late() -> None:
    counter = LateCounter("t")
    for i in range(2500):
        if i % 100 == 0:
            counter.late("negative-timestamp", -1, 5)
        elif i % 10 == 0:
            counter.late("window-closed", 100, 100 + i)
        counter.seen()
    assert counter.records == 2500
    assert counter.by_reason == {"negative-timestamp": 25, "window-closed": 225}
    # The last whole interval, records 1000..1999: 90 late, 1.01 to 1.99 s behind (not the
    # multiples of 100 ms: those are the negative timestamps), the lower median the 45th.
    assert counter.interval == LateInterval(1000, 90, 0.09, 1_490, 1_990)
    assert counter.warnings == 1  # the first interval jumped (9% > 1%), the second did not


SPECS: dict[str, WindowSpec] = {
    "tumbling": Tumbling(10, grace=5),
    "hopping": Hopping(10, 5, grace=5),
    "sliding": Sliding(10, grace=5),
    "session": Session(10, grace=5),
}


@pytest.mark.parametrize("kind", SPECS)
async def test_every_window_kind_counts_its_late_records_by_reason(kind: str) -> None:
    app = sk.App(f"late-kinds-{kind}")
    views = app.topic("views", key_type=str, value_type=int, partitions=1)
    spec = SPECS[kind]
    grouped = app.stream(views).group_by_key().window(spec)
    if kind == "session":
        grouped.reduce("declared", lambda a, b: a + b)
    else:
        grouped.count("declared")
    faust = getattr(app.Table("faust", default=int), kind)(*({"hopping": (10, 5)}.get(kind, (10,))), grace=5)

    @app.agent(views)
    async def write(stream: sk.Stream) -> None:
        async for event in stream.events():
            faust[event.key] += 1

    async with AppDriver(app) as driver:
        for ts in (50_000, 100_000, 1_000, 97_000):  # 1 s: late for every kind; 97 s: in the grace
            await driver.send(views, 1, key="k", timestamp=BASE + ts)
        await driver.process()
        late = await driver.read(app.topics[f"late-kinds-{kind}-late"])
    assert sorted(dict(e.headers)["streamkit.table"].decode() for e in late) == ["declared", "faust"]
    assert late_counts(app) == {"declared": {"window-closed": 1}, "faust": {"window-closed": 1}}
    assert {name: rate["records"] for name, rate in late_rates(app).items()} == {"declared": 4, "faust": 4}


async def test_a_hopping_record_some_of_whose_windows_closed_is_counted() -> None:
    app = sk.App("late-hopping")
    views = app.topic("views", key_type=str, value_type=int, partitions=1)
    declared = app.stream(views).group_by_key().window(Hopping(10, 5)).count("declared")
    faust = app.Table("faust", default=int).hopping(10, 5)

    @app.agent(views)
    async def write(stream: sk.Stream) -> None:
        async for event in stream.events():
            faust[event.key] += 1

    async with AppDriver(app) as driver:
        # At stream time 21 s the windows [0, 10) .. [10, 20) are closed: a record at 12 s
        # belongs to [5, 15) (closed) and [10, 20) (closed); one at 16 s to [10, 20) (closed)
        # and [15, 25) (open): in the open one only.
        for ts in (1_000, 21_000, 16_000):
            await driver.send(views, 1, key="k", timestamp=BASE + ts)
        await driver.process()
        late = await driver.read(app.topics["late-hopping-late"])
        windows = [(w["start"] - BASE, w["value"]) for w in declared.windows("k")]
    assert (15_000, 2) in windows and (10_000, 1) not in windows
    assert late == []  # held by an open window: not set aside
    assert late_counts(app) == {"declared": {"window-closed-partly": 1}, "faust": {"window-closed-partly": 1}}
