"""Waiting that a stop cuts short (the sleeps of ``app.sleep``, services and agent back-off),
and waiting for the futures a component keeps in flight (``drain``)."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any


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


async def drain(*groups: Collection[asyncio.Future[Any]]) -> None:
    """Wait until every future in ``groups`` is done, also those added while waiting.

    Such sets are usually kept by done callbacks (``fut.add_done_callback(pending.discard)``),
    and the loop runs those callbacks later: a future that is done may still be in its set.
    So this looks at ``done()``, never at a set being empty. A loop ``while pending: await
    asyncio.gather(*pending)`` spins forever on Python 3.12+ when it meets a done future whose
    callback has not run yet: there ``gather`` over futures that are all done returns a done
    future, awaiting it does not yield, and the loop never gets to run the callback.
    Exceptions are retrieved here (their owners report them), as ``gather(...,
    return_exceptions=True)`` would."""
    while True:
        pending = [fut for group in groups for fut in group if not fut.done()]
        if not pending:
            return
        done, _pending = await asyncio.wait(pending)
        for fut in done:
            if not fut.cancelled():
                fut.exception()
