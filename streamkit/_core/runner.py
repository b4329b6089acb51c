"""Running a coroutine to its end from synchronous code, on a long-lived ``asyncio.Runner``."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


def run_to_end(runner: asyncio.Runner, work: Coroutine[Any, Any, _T]) -> _T:
    """``runner.run(work)``, with the result handed back outside the task.

    In the main thread, Python 3.11's ``Runner.run`` looks up its SIGINT handler once the task
    is done, and that lookup formats the handler's repr: the task's, which holds the repr of
    the task's result. For a fetch that is megabytes of bytes formatted on every call (a
    broker read of the Spark data source spent two thirds of its time there). The task run
    here returns None."""
    box: list[_T] = []

    async def boxed() -> None:
        box.append(await work)

    runner.run(boxed())
    return box[0]
