"""``Service``: a long-lived part of an app with start and stop hooks (Faust's ``faust.Service``,
which is mode's), started with the worker when registered with ``@app.service``.

    >>> import streamkit as faust
    >>> app = faust.App("docs-services")
    >>> @app.service
    ... class Heartbeat(faust.Service):
    ...     async def on_start(self) -> None:
    ...         self.log.info("starting")
    ...
    ...     @faust.Service.timer(5.0)
    ...     async def beat(self) -> None:
    ...         self.log.info("still here")
    >>> [type(s).__name__ if not isinstance(s, type) else s.__name__ for s in app.services]
    ['Heartbeat']

Life of a service, as mode orders it: ``start`` adds the services ``on_init_dependencies``
returns (first start only), calls ``on_first_start`` (first start only) and ``on_start``,
starts the class's ``@Service.task``/``@Service.timer``/``@Service.crontab`` methods in the
background, starts its dependencies, then calls ``on_started``. ``stop`` marks it stopping
(``should_stop`` turns True and every ``self.sleep`` returns at once), calls ``on_stop``,
stops its dependencies in reverse order, lets background tasks that finished on their own
finish, cancels the rest, then calls ``on_shutdown``. A background task that raises crashes
the service: it is logged, ``crashed`` and ``crash_reason`` tell it, and the crash goes up to
the service's parent; at the top, to the worker, which stops with that error (as a Faust
worker does).

Times: ``sleep``, ``timer`` and ``wait_for_stopped`` take seconds or a ``timedelta`` (the API
edge); a service with a cron method uses the system clock.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta, tzinfo
from typing import Any, ClassVar

from streamkit._core.errors import ConfigError
from streamkit._core.waiting import sleep_unless
from streamkit.app.crontab import CronSchedule

ServiceMethod = Callable[[Any], Awaitable[None]]


class ServiceTask:
    """A method a service runs in the background while it runs (made by ``Service.task``)."""

    def __init__(self, fn: ServiceMethod) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    async def __call__(self, service: Any) -> None:
        await self.fn(service)

    def __repr__(self) -> str:
        return f"<ServiceTask {getattr(self.fn, '__qualname__', self.fn)!r}>"


def _seconds(value: float | int | timedelta, what: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds < 0:
        raise ConfigError(f"{what} must be seconds (a number >= 0) or a timedelta, not {value!r}")
    return float(seconds)


class _ServiceLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """``self.log``: the logger of the service's module, each line prefixed with its name."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"[^{self.extra['label'] if self.extra else ''}]: {msg}", kwargs


class Service:
    """Subclass it, override the hooks you need, decorate background methods with
    ``@Service.task``, ``@Service.timer(seconds)`` or ``@Service.crontab(...)``."""

    #: Background methods of the class, by attribute name, inherited ones included.
    _service_tasks: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if isinstance(value, ServiceTask) and name not in names:
                    names.append(name)
        cls._service_tasks = tuple(names)

    def __init__(self, *, loop: asyncio.AbstractEventLoop | None = None, beacon: Any = None) -> None:
        """``loop`` and ``beacon`` are accepted as mode's services take them; the service runs
        on the running loop, and the parent a service answers to is whoever starts it."""
        self.log = _ServiceLog(logging.getLogger(type(self).__module__), {"label": self.shortlabel})
        self._children: list[Service] = []
        self._futures: set[asyncio.Future[Any]] = set()
        self._started = False
        self._stopped: asyncio.Event | None = None
        self._shut_down = False
        self._crash_reason: BaseException | None = None
        self._on_crash: Callable[[BaseException], None] | None = None
        self._first_start_done = False
        self.restart_count = 0

    # -- declaring background methods -------------------------------------------------------

    @classmethod
    def task(cls, fun: ServiceMethod) -> ServiceTask:
        """Run ``fun(self)`` in the background from start to stop (loop on ``should_stop``)."""
        return ServiceTask(fun)

    @classmethod
    def timer(
        cls, interval: float | timedelta, *, exec_first: bool = False, name: str | None = None
    ) -> Callable[[ServiceMethod], ServiceTask]:
        """Call the method every ``interval`` seconds (first after one interval, or at once with
        ``exec_first=True``) until the service stops. Late calls do not pile up: a tick that
        ran past the next one skips it."""
        seconds = _seconds(interval, "a timer's interval")
        if not seconds:
            raise ConfigError("a timer needs an interval above 0 seconds")

        def decorate(fun: ServiceMethod) -> ServiceTask:
            @functools.wraps(fun)
            async def repeat(self: Service) -> None:
                if exec_first and not self.should_stop:
                    await fun(self)
                due = time.monotonic() + seconds
                while not self.should_stop:
                    await self.sleep(max(0.0, due - time.monotonic()))
                    if self.should_stop:
                        break
                    await fun(self)
                    now = time.monotonic()
                    due += seconds * (1 + max(0, int((now - due) // seconds)))

            return cls.task(repeat)

        return decorate

    @classmethod
    def crontab(cls, cron_format: str, *, timezone: tzinfo | None = None) -> Callable[[ServiceMethod], ServiceTask]:
        """Call the method at the times of a cron line (``"30 18 * * *"``), read in
        ``timezone`` (UTC when None), until the service stops."""
        schedule = CronSchedule(cron_format, timezone)

        def decorate(fun: ServiceMethod) -> ServiceTask:
            @functools.wraps(fun)
            async def on_schedule(self: Service) -> None:
                while not self.should_stop:
                    await self.sleep(schedule.ms_until_next(time.time_ns() // 1_000_000) / 1000)
                    if not self.should_stop:
                        await fun(self)

            return cls.task(on_schedule)

        return decorate

    @classmethod
    def from_awaitable(cls, coro: Awaitable[Any], *, name: str | None = None, **kwargs: Any) -> Service:
        """A service that runs ``coro`` while it runs (mode's helper)."""
        return _AwaitableService(coro, name=name)

    # -- hooks (override) --------------------------------------------------------------------

    def on_init_dependencies(self) -> Iterable[Service]:
        """Services to start with this one (after its ``on_start``) and stop with it."""
        return []

    async def on_first_start(self) -> None:
        """Called before ``on_start``, the first time the service starts."""

    async def on_start(self) -> None:
        """Called when the service starts, before its background tasks and dependencies."""

    async def on_started(self) -> None:
        """Called once the service, its background tasks and its dependencies have started."""

    async def on_stop(self) -> None:
        """Called first when the service stops (its dependencies still run)."""

    async def on_shutdown(self) -> None:
        """Called last when the service stops (its tasks and dependencies have ended)."""

    async def on_restart(self) -> None:
        """Called by ``restart`` between the stop and the start."""

    # -- dependencies and futures ------------------------------------------------------------

    def add_dependency(self, service: Service) -> Service:
        """Start and stop ``service`` with this one."""
        if not isinstance(service, Service):
            raise ConfigError(f"a dependency must be a streamkit Service, not {service!r}")
        service._on_crash = self._child_crashed
        self._children.append(service)
        return service

    async def add_runtime_dependency(self, service: Service) -> Service:
        """``add_dependency``, and start it now when this service already runs."""
        self.add_dependency(service)
        if self._started and not self.should_stop:
            await service.maybe_start()
        return service

    async def remove_dependency(self, service: Service) -> Service:
        await service.stop()
        self._children.remove(service)
        service._on_crash = None
        return service

    def add_future(self, coro: Awaitable[Any]) -> asyncio.Future[Any]:
        """Run ``coro`` in the background; stopping the service ends it. If it raises, the
        service crashes."""
        future = asyncio.ensure_future(self._execute(coro))
        self._futures.add(future)
        future.add_done_callback(self._futures.discard)
        return future

    async def _execute(self, coro: Awaitable[Any]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            if not self.should_stop:
                raise
        except Exception as exc:
            await self.crash(exc)

    # -- running -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            raise RuntimeError(f"{self.label} is already started")
        self._started = True
        self._stopped = asyncio.Event()
        if not self._first_start_done:
            self._first_start_done = True
            for dependency in self.on_init_dependencies():
                self.add_dependency(dependency)
            await self.on_first_start()
        if self.should_stop:
            return
        await self.on_start()
        if self.should_stop:
            return
        for name in self._service_tasks:
            task: ServiceTask = getattr(type(self), name)
            self.add_future(task(self))
        for child in list(self._children):
            await child.maybe_start()
            if self.should_stop:
                return
        await self.on_started()

    async def maybe_start(self) -> bool:
        """Start unless started; returns whether it started now."""
        if self._started:
            return False
        await self.start()
        return True

    async def stop(self) -> None:
        if self._stopped is None:
            self._stopped = asyncio.Event()
        if self._stopped.is_set():
            return
        self._stopped.set()
        await self.on_stop()
        for child in reversed(self._children):
            try:
                await asyncio.shield(child.stop())
            except Exception:
                self.log.exception("stopping %s failed", child.label)
        futures = list(self._futures)
        for future in futures:
            future.cancel()
        await asyncio.gather(*futures, return_exceptions=True)
        self._futures.clear()
        self._shut_down = True
        await self.on_shutdown()

    async def restart(self) -> None:
        await self.stop()
        self.restart_count += 1
        self._started = False
        self._stopped = None
        self._shut_down = False
        self._crash_reason = None
        for child in self._children:
            child._started, child._stopped, child._shut_down = False, None, False
        await self.on_restart()
        await self.start()

    async def crash(self, reason: BaseException) -> None:
        """Mark the service crashed (its tasks see ``should_stop``) and tell its parent."""
        if self._crash_reason is not None:
            return
        self._crash_reason = reason
        self.log.error("crashed: %r", reason, exc_info=reason)
        if self._stopped is not None:
            self._stopped.set()
        if self._on_crash is not None:
            self._on_crash(reason)

    def _child_crashed(self, reason: BaseException) -> None:
        self.add_future(self.crash(reason))

    async def __aenter__(self) -> Service:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- waiting -----------------------------------------------------------------------------

    async def sleep(self, n: float | timedelta) -> None:
        """Sleep ``n`` seconds, or less when the service stops meanwhile."""
        seconds = _seconds(n, "sleep")
        await sleep_unless(self._stopped, seconds)

    async def wait_for_stopped(self, *coros: Awaitable[Any], timeout: float | timedelta | None = None) -> bool:
        """Wait until the service stops (at most ``timeout``), or ``coros[0]`` finishes first;
        returns whether it stopped."""
        if self._stopped is None:
            self._stopped = asyncio.Event()
        stopped = asyncio.ensure_future(self._stopped.wait())
        waiting: set[asyncio.Future[Any]] = {stopped}
        other = asyncio.ensure_future(coros[0]) if coros else None
        if other is not None:
            waiting.add(other)
        try:
            await asyncio.wait(
                waiting,
                timeout=None if timeout is None else _seconds(timeout, "timeout"),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            for future in waiting:
                if not future.done():
                    future.cancel()
        return self.should_stop

    async def wait_until_stopped(self) -> None:
        await self.wait_for_stopped()

    # -- state -------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._started

    @property
    def should_stop(self) -> bool:
        """True once the service is stopping, stopped or crashed."""
        return (self._stopped is not None and self._stopped.is_set()) or self._crash_reason is not None

    @property
    def crashed(self) -> bool:
        return self._crash_reason is not None

    @property
    def crash_reason(self) -> BaseException | None:
        return self._crash_reason

    @property
    def state(self) -> str:
        """"init", "running", "stopping", "shutdown" or "crashed"."""
        if self._crash_reason is not None:
            return "crashed"
        if not self._started:
            return "init"
        if not self.should_stop:
            return "running"
        return "shutdown" if self._shut_down else "stopping"

    @property
    def label(self) -> str:
        return f"{type(self).__name__}: {self.state}"

    @property
    def shortlabel(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{self.label}>"


class _AwaitableService(Service):
    def __init__(self, coro: Awaitable[Any], *, name: str | None = None) -> None:
        self._coro = coro
        self._name = name
        super().__init__()

    async def on_start(self) -> None:
        self.add_future(self._coro)

    @property
    def shortlabel(self) -> str:
        return self._name or "awaitable"


def instantiate(service: type[Service] | Service) -> Service:
    """The instance of what ``@app.service`` registered: a class is constructed with no
    arguments, an instance is used as it is."""
    if isinstance(service, Service):
        return service
    made = service()
    if not isinstance(made, Service):
        raise ConfigError(f"@app.service needs a streamkit Service (class or instance), not {service!r}")
    return made


__all__ = ["Service", "ServiceTask", "instantiate"]
