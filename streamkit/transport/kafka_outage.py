"""A Kafka cluster that does not answer: noticing it, saying so, and keeping aiokafka quiet.

``OutageWatch`` is plain code fed with the outcome of each probe of the cluster and the time
(``KafkaLogClient`` probes every ``PROBE_EVERY_S``: a metadata request to every broker it
knows, ``KafkaTools.unreachable``). Failures for ``OUTAGE_AFTER_S`` or longer make an
outage: ``reason`` says so (the worker's ``/health`` answers 503 with it), one warning line
says it began, another every ``REMIND_EVERY_S`` while it lasts, and one info line when the
cluster answers again. A broker of several going away is no outage: the others answer the
metadata request (its partitions' leaders move, the clients follow them).

``ClientNoise`` is a logging filter on aiokafka's loggers, installed once by
``install_client_noise_filter`` (``transport/kafka.py`` calls it on import): aiokafka logs
every failed connection, metadata update, fetch and heartbeat as an ERROR or WARNING line,
over a hundred a second while a cluster is down, which the watch's lines stand for. Those
records are turned into DEBUG records (shown with ``--loglevel debug``, dropped otherwise);
every other aiokafka line passes as it was. A line whose exception was caused by an unreachable
broker is one of them: when a transactional producer's coordinator lookup meets a broker that
was just killed, aiokafka's sender gives up ("Unexpected error in sender routine", three
chained tracebacks) and fails the transaction's batches, which the task reports in its own one
line and recovers from.

``ClientFaults``, on the ``asyncio`` logger, does the same for the exceptions aiokafka's own
callbacks and tasks raise after such a failure (a batch taken out of its accumulator twice:
"Exception in callback MessageAccumulator...", "Task exception was never retrieved"), which
asyncio reports, not aiokafka: an exception raised in aiokafka's code that nobody awaits. An
exception raised anywhere else is reported as it was.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import aiokafka
from aiokafka.errors import (
    CoordinatorNotAvailableError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NodeNotReadyError,
    NotCoordinatorError,
    RequestTimedOutError,
)

logger = logging.getLogger(__name__)

PROBE_EVERY_S = 1.0  # how often a started client asks the cluster for its metadata
PROBE_TIMEOUT_S = 5.0  # a probe unanswered this long failed (a hung broker accepts, answers nothing)
OUTAGE_AFTER_S = 3.0  # failing this long is an outage (a restart of one broker is shorter)
REMIND_EVERY_S = 30.0
# A probe: given its timeout in seconds, None when the cluster answered, else why not.
Probe = Callable[[float], Awaitable[str | None]]

# aiokafka's messages (format strings) about a broker it cannot reach or that did not answer.
_UNREACHABLE_MESSAGES = frozenset({
    'Unable connect to "%s:%s": %s',
    'Unable to request metadata from "%s:%s": %s',
    "Unable to request metadata from node with id %s: %r",
    "Unable to update metadata from %s",
    "Unable connect to node with id %s: %s",
    "Failed fetch messages from %s: %s",
    "Failed fetch offsets from %s: %s",
    "Group Coordinator Request failed: %s",
    "FindCoordinator Request failed: %s",
    "Heartbeat send request failed: %s. Will retry.",
    "Heartbeat session expired - marking coordinator dead",
    "Marking the coordinator dead (node %s)for group %s.",
    "Heartbeat failed for group %s: coordinator (node %s) is either not started or not valid",
    "Error sending %s to node %s [%s] -- marking coordinator dead",
    "Cannot send %r to %s: %r",
    "Could not send %r: %r",
})
# Errors that, named in any aiokafka line, make it a line about reaching the cluster.
_UNREACHABLE_ERRORS = (
    KafkaConnectionError, NodeNotReadyError, RequestTimedOutError, KafkaTimeoutError,
    CoordinatorNotAvailableError, NotCoordinatorError, OSError, TimeoutError,
)


class OutageWatch:
    """Whether the cluster at ``where`` answers, from the probes' outcomes (module doc).
    Times are monotonic seconds, given by the caller."""

    def __init__(self, where: str, *, after_s: float = OUTAGE_AFTER_S, remind_s: float = REMIND_EVERY_S) -> None:
        self.where = where
        self.after_s = after_s
        self.remind_s = remind_s
        self.reason: str | None = None  # set while an outage lasts
        self.outages = 0
        self._failing_since: float | None = None
        self._reminded: float = 0.0

    def failed(self, now: float, why: str) -> None:
        """A probe got no answer at ``now``: ``why``."""
        if self._failing_since is None:
            self._failing_since = now
        lasted = now - self._failing_since
        if self.reason is None:
            if lasted < self.after_s:
                return
            self.outages += 1
            self._reminded = now
            logger.warning(
                "Kafka at %s does not answer (%s): waiting for it, the worker goes on when it is back", self.where, why
            )
        elif now - self._reminded >= self.remind_s:
            self._reminded = now
            logger.warning("Kafka at %s still does not answer after %.0f s (%s): waiting for it", self.where, lasted, why)
        self.reason = f"Kafka at {self.where} does not answer: {why}"

    def answered(self, now: float) -> None:
        """A probe got an answer at ``now``."""
        if self.reason is not None and self._failing_since is not None:
            logger.info("Kafka at %s answers again, after %.0f s", self.where, now - self._failing_since)
        self._failing_since = None
        self.reason = None


class ClientNoise(logging.Filter):
    """aiokafka's lines about a cluster it cannot reach become DEBUG lines (module doc)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not _about_reaching(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def _about_reaching(record: logging.LogRecord) -> bool:
    if record.msg in _UNREACHABLE_MESSAGES:
        return True
    args = record.args if isinstance(record.args, tuple) else ()
    if any(isinstance(arg, _UNREACHABLE_ERRORS) for arg in args):
        return True
    exc_info = _exc_info(record)
    return exc_info is not None and _caused_by_unreachable(exc_info[1])


def _caused_by_unreachable(exc: BaseException | None) -> bool:
    """Whether ``exc`` or an exception in its chain (``raise ... from``) is about reaching."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, _UNREACHABLE_ERRORS):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


_AIOKAFKA_DIR = os.path.dirname(aiokafka.__file__) + os.sep
_ASYNCIO_DIR = os.path.dirname(asyncio.__file__) + os.sep


class ClientFaults(logging.Filter):
    """asyncio's reports of exceptions raised in aiokafka's code become DEBUG lines (module
    doc)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not _raised_in_aiokafka(record):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def _exc_info(record: logging.LogRecord) -> tuple[Any, BaseException | None, TracebackType | None] | None:
    """The exception a record reports, if any: ``exc_info`` may also be False (asyncio's
    handler passes ``exc_info=False`` for a context without an exception)."""
    return record.exc_info if isinstance(record.exc_info, tuple) else None


def _raised_in_aiokafka(record: logging.LogRecord) -> bool:
    """Whether the callback or task asyncio ran, whose exception ``record`` reports, is
    aiokafka's: the traceback's first frame outside asyncio is in aiokafka's package."""
    exc_info = _exc_info(record)
    tb = exc_info[2] if exc_info is not None else None
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_ASYNCIO_DIR):
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename.startswith(_AIOKAFKA_DIR)


_NOISE = ClientNoise()
_FAULTS = ClientFaults()


def install_client_noise_filter() -> None:
    """Put ``ClientNoise`` on every aiokafka logger (a filter on a logger applies to what is
    logged there, not to what its children log, so each gets it) and ``ClientFaults`` on
    asyncio's; idempotent."""
    names = [name for name in logging.Logger.manager.loggerDict if name == "aiokafka" or name.startswith("aiokafka.")]
    for name in names:
        client_logger = logging.getLogger(name)
        if _NOISE not in client_logger.filters:
            client_logger.addFilter(_NOISE)
    loop_logger = logging.getLogger("asyncio")
    if _FAULTS not in loop_logger.filters:
        loop_logger.addFilter(_FAULTS)


async def watch_cluster(watch: OutageWatch, probe: Probe) -> None:
    """Probe the cluster every ``PROBE_EVERY_S`` and tell ``watch``, until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(PROBE_EVERY_S)
        why = await probe(PROBE_TIMEOUT_S)
        if why is None:
            watch.answered(loop.time())
        else:
            watch.failed(loop.time(), why)
