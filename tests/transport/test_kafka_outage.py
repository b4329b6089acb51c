"""``kafka_outage``: when failed probes make an outage and what it says, and the filter that
keeps aiokafka's lines about an unreachable cluster out of the log."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaError
from aiokafka.util import parse_kafka_version

from streamkit.transport import kafka as _kafka  # noqa: F401  (installs the filter, as any use does)
from streamkit.transport.kafka_outage import ClientFaults, ClientNoise, OutageWatch

WATCH_LOGGER = "streamkit.transport.kafka_outage"


def test_failures_shorter_than_the_threshold_are_no_outage(caplog: pytest.LogCaptureFixture) -> None:
    watch = OutageWatch("h:9092", after_s=3.0)
    with caplog.at_level(logging.INFO, WATCH_LOGGER):
        watch.failed(10.0, "refused")
        watch.failed(12.9, "refused")
        assert watch.reason is None
        watch.answered(13.0)
        watch.failed(14.0, "refused")
        watch.failed(16.5, "refused")  # the clock started again at 14
    assert watch.reason is None and watch.outages == 0
    assert caplog.records == []


def test_an_outage_is_said_once_reminded_every_30_s_and_its_end_said_once(caplog: pytest.LogCaptureFixture) -> None:
    watch = OutageWatch("h:9092", after_s=3.0, remind_s=30.0)
    with caplog.at_level(logging.INFO, WATCH_LOGGER):
        for second in range(0, 75):
            watch.failed(100.0 + second, "connection refused")
        assert watch.reason == "Kafka at h:9092 does not answer: connection refused"
        watch.answered(175.0)
        watch.answered(176.0)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == ["WARNING", "WARNING", "WARNING", "INFO"], lines
    assert lines[0][1].startswith("Kafka at h:9092 does not answer (connection refused): waiting for it")
    assert lines[1][1] == "Kafka at h:9092 still does not answer after 33 s (connection refused): waiting for it"
    assert lines[2][1].startswith("Kafka at h:9092 still does not answer after 63 s")
    assert lines[3][1] == "Kafka at h:9092 answers again, after 75 s"
    assert watch.reason is None and watch.outages == 1


def _record(name: str, level: int, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_aiokafka_lines_about_reaching_the_cluster_become_debug_lines() -> None:
    noise = ClientNoise()
    client = logging.getLogger("aiokafka")
    before = client.level
    try:
        client.setLevel(logging.INFO)
        unreachable = _record("aiokafka", logging.ERROR, "Unable connect to node with id %s: %s", 1, "refused")
        assert noise.filter(unreachable) is False  # DEBUG now, and DEBUG is not shown
        assert unreachable.levelname == "DEBUG"
        named = _record("aiokafka.consumer.fetcher", logging.ERROR, "whatever %s", KafkaConnectionError("x"))
        assert noise.filter(named) is False
        other = _record("aiokafka", logging.ERROR, "Topic %s not found in cluster metadata", "t")
        assert noise.filter(other) is True and other.levelname == "ERROR"
        client.setLevel(logging.DEBUG)  # --loglevel debug shows them, as DEBUG lines
        shown = _record("aiokafka", logging.ERROR, "Unable to update metadata from %s", [1])
        assert noise.filter(shown) is True and shown.levelname == "DEBUG"
    finally:
        client.setLevel(before)


def _raised(exc: BaseException, cause: BaseException | None) -> BaseException:
    try:
        raise exc from cause
    except BaseException as raised:
        return raised


def test_an_aiokafka_traceback_caused_by_an_unreachable_broker_becomes_a_debug_line() -> None:
    """aiokafka's sender gives up when a coordinator lookup meets a killed broker: its line
    carries the exception chain, not the error in its arguments."""
    noise = ClientNoise()
    given_up = _raised(KafkaError("Unexpected error during batch delivery"),
                       _raised(KafkaError("lookup"), KafkaConnectionError("Connection at 127.0.0.1:1 closed")))
    record = _record("aiokafka.producer.sender", logging.ERROR, "Unexpected error in sender routine")
    record.exc_info = (type(given_up), given_up, given_up.__traceback__)
    assert noise.filter(record) is False and record.levelname == "DEBUG"
    other = _raised(KafkaError("Unexpected error during batch delivery"), ValueError("a bug"))
    shown = _record("aiokafka.producer.sender", logging.ERROR, "Unexpected error in sender routine")
    shown.exc_info = (type(other), other, other.__traceback__)
    assert noise.filter(shown) is True and shown.levelname == "ERROR"


def _a_bug_of_ours() -> None:
    raise KeyError("ours")


def test_asyncio_reports_of_exceptions_in_aiokafka_callbacks_become_debug_lines(caplog: pytest.LogCaptureFixture) -> None:
    """A callback of aiokafka's that raises (as its accumulator's after a failed send) is
    reported by asyncio's logger; one of anybody else's still is, as an ERROR."""
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.INFO, "asyncio"):
            loop.call_soon(parse_kafka_version, "not a version")  # raises inside aiokafka
            loop.call_soon(_a_bug_of_ours)
            loop.run_until_complete(asyncio.sleep(0.01))
    finally:
        loop.close()
    reported = [(r.levelname, r.exc_info[1] if r.exc_info else None) for r in caplog.records if r.name == "asyncio"]
    assert len(reported) == 1 and reported[0][0] == "ERROR" and isinstance(reported[0][1], KeyError), reported


def test_the_filter_is_on_every_aiokafka_logger() -> None:
    for name in ("aiokafka", "aiokafka.conn", "aiokafka.consumer.fetcher", "aiokafka.consumer.group_coordinator",
                 "aiokafka.producer.sender"):
        assert any(isinstance(f, ClientNoise) for f in logging.getLogger(name).filters), name
    assert any(isinstance(f, ClientFaults) for f in logging.getLogger("asyncio").filters)


def test_records_whose_exc_info_is_false_pass_the_filters_unchanged() -> None:
    """asyncio's handler logs a context without an exception with ``exc_info=False`` (e.g. a
    task destroyed while pending): the filters must let it through as it is, not fail on it."""
    for flt, name in ((ClientFaults(), "asyncio"), (ClientNoise(), "aiokafka.conn")):
        record = logging.LogRecord(name, logging.ERROR, __file__, 1, "Task was destroyed but it is pending!", (), False)
        assert flt.filter(record) and record.levelno == logging.ERROR
