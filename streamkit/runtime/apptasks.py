"""The app's own background work: its tasks (``@app.task``) and its services (``app.service``).

The worker starts them last, after its consumer and timers, in Faust's order: the tasks,
then the services (which may use what the tasks set up). It stops them first, while its
producer still runs: the services (last started, first stopped), then a grace of
``TASK_STOP_GRACE_S`` for the tasks that watch ``app.should_stop`` to end by themselves; the
worker then cancels what still runs, with its other loops. A task that raises is logged and
ends (the worker goes on); a service whose background task raises stops the worker with that
error, as Faust's does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from streamkit.app.application import App
from streamkit.app.services import Service, instantiate

logger = logging.getLogger(__name__)
TASK_STOP_GRACE_S = 1.0  # how long a stop waits for app tasks to end after should_stop turns True

Spawn = Callable[[Awaitable[Any], str], asyncio.Task[Any]]


class AppTasks:
    """The app's tasks and services of one worker; ``fail`` stops the worker."""

    def __init__(self, app: App, fail: Callable[[BaseException], None]) -> None:
        self._app = app
        self._fail = fail
        self._tasks: list[asyncio.Task[Any]] = []
        self.services: list[Service] = []  # the app's services, started after its tasks

    async def start(self, spawn: Spawn) -> None:
        """Start the tasks through ``spawn`` (the worker's loops), then the services."""
        for fn in self._app.tasks:
            name = getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "task")
            self._tasks.append(spawn(_run_app_task(fn), f"task:{name}"))
        for declared in self._app.services:
            service = instantiate(declared)
            service._on_crash = self._service_crashed
            self.services.append(service)
            await service.start()

    async def stop(self) -> None:
        """Stop the services, then give the tasks a moment to end (the caller cancels them)."""
        for service in reversed(self.services):
            try:
                await service.stop()
            except Exception:
                logger.exception("stopping service %s failed", service.shortlabel)
        running = [t for t in self._tasks if not t.done()]
        if running:
            await asyncio.wait(running, timeout=TASK_STOP_GRACE_S)

    def _service_crashed(self, reason: BaseException) -> None:
        """A service's background task raised: the worker stops with that error, as Faust's."""
        logger.error("service crashed, stopping the worker: %r", reason)
        self._fail(reason)


async def _run_app_task(fn: Callable[[], Awaitable[Any]]) -> None:
    try:
        await fn()
    except Exception:
        logger.exception("task %s failed", getattr(fn, "__name__", fn))
