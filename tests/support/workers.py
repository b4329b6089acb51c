"""An in-process ``Worker`` as the backend tests drive it on any log (``log_url``): wait until
the group gave it its input partitions (before that a worker looks settled with nothing to
do), and read a topic back whole from outside the worker."""

from __future__ import annotations

import asyncio
from typing import Any

from streamkit.runtime import Worker
from streamkit.transport import open_log_client
from tests.runtime.test_alignment import _read


async def until_assigned(worker: Worker, partitions: int, timeout: float = 60.0) -> None:
    """Until ``worker`` holds ``partitions`` input partitions (a group join on Kafka takes a
    moment; the embedded log assigns at once)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(worker.assignment()) < partitions:
        assert loop.time() < deadline, f"the worker holds {sorted(map(str, worker.assignment()))}, not {partitions} partitions"
        await asyncio.sleep(0.05)


async def read_topic(url: str, topic: str, isolation_level: str = "read_uncommitted") -> list[Any]:
    """Every record of ``topic`` on ``url``, partition by partition."""
    client = open_log_client(url)
    await client.start()
    try:
        return await _read(client, topic, isolation_level)
    finally:
        await client.aclose()
