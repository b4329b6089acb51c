"""``StopDeadline`` (``runtime/shutdown.py``): the waits of a stop end by one deadline, what
was given up is said in one line, and a wait that waits again in a ``finally`` is cancelled
again."""

from __future__ import annotations

import asyncio
import logging

import pytest

from streamkit.runtime.shutdown import StopDeadline


async def _forever() -> None:
    await asyncio.Event().wait()


async def test_waits_end_at_the_deadline_and_one_line_names_what_was_given_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = StopDeadline(0.3, "kafka://127.0.0.1:9")
    began = loop.time()
    await deadline.run("committing offsets of 2 partitions", _forever())
    await deadline.run("quick", asyncio.sleep(0))  # past the deadline, it still gets to end
    await deadline.run("leaving group 'g'", _forever())
    took = loop.time() - began
    assert 0.3 <= took < 1.5
    assert deadline.given_up == ["committing offsets of 2 partitions", "leaving group 'g'"]
    deadline.report()
    lines = [r.getMessage() for r in caplog.records if "stop: gave up" in r.getMessage()]
    assert lines == [
        "stop: gave up committing offsets of 2 partitions, leaving group 'g' after 0.3 s: "
        "kafka://127.0.0.1:9 did not answer"
    ]


async def test_a_wait_that_waits_again_when_cancelled_is_cancelled_again() -> None:
    ended: list[str] = []

    async def close_gracefully_on_cancel() -> None:
        try:
            await _forever()
        finally:
            try:
                await _forever()  # a graceful close in a finally: the log still does not answer
            finally:
                ended.append("closed")

    deadline = StopDeadline(0.1, "kafka://x")
    await asyncio.wait_for(deadline.run("closing", close_gracefully_on_cancel()), 3)
    assert ended == ["closed"]


async def test_a_failure_before_the_deadline_is_raised_and_nothing_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails() -> None:
        raise RuntimeError("refused")

    caplog.set_level(logging.DEBUG)
    deadline = StopDeadline(5.0, "kafka://x")
    with pytest.raises(RuntimeError, match="refused"):
        await deadline.run("committing", fails())
    deadline.report()
    assert deadline.given_up == [] and not [r for r in caplog.records if "gave up" in r.getMessage()]


async def test_an_unbounded_deadline_waits_as_long_as_it_takes() -> None:
    """The embedded log's waits are local work a cancellation would cut in the middle."""
    deadline = StopDeadline(0.05, "file://x", bounded=False)
    await deadline.run("closing", asyncio.sleep(0.2))
    assert deadline.given_up == []
