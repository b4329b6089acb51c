"""Waiting that a stop cuts short: the sleeps of ``app.sleep``, services and agent back-off."""

from __future__ import annotations

import asyncio


async def sleep_unless(stop: asyncio.Event | None, seconds: float) -> bool:
    """Sleep ``seconds``, returning early (True) once ``stop`` is set; None: a plain sleep."""
    if stop is None:
        await asyncio.sleep(seconds)
        return False
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True
