"""``drain``: waiting for the futures a component keeps in flight, by their state, not by the
set that done callbacks keep."""

from __future__ import annotations

import asyncio

import pytest

from streamkit._core.waiting import drain


@pytest.mark.timeout(10)
async def test_drain_returns_when_the_futures_are_done_though_still_in_their_set() -> None:
    """A done future whose set still holds it (its discard callback has not run) counts as
    drained: waiting for the set to empty spun forever on Python 3.12+."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()
    done.set_result(1)
    pending = {done}  # nothing discards it
    await drain(pending)
    assert pending == {done}


async def test_drain_waits_for_futures_added_while_waiting_and_retrieves_errors() -> None:
    loop = asyncio.get_running_loop()
    first: asyncio.Future[int] = loop.create_future()
    later: asyncio.Future[int] = loop.create_future()
    inflight: set[asyncio.Future[int]] = {first}
    tasks: set[asyncio.Future[None]] = set()

    def step() -> None:
        inflight.add(later)  # handed over while drain waits for the first
        first.set_result(1)
        loop.call_later(0.05, later.set_exception, ValueError("stored nowhere"))

    loop.call_soon(step)
    await drain(tasks, inflight)
    assert first.done() and later.done()
    assert isinstance(later.exception(), ValueError)
