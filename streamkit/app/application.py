"""``App``: the registry of an application's topics, agents, timers, tasks, cron jobs, services,
commands and web pages.

An app only declares; a ``Worker`` (``streamkit worker -A module:app``, or
``streamkit.testing``) runs it. Declaring needs no broker: topics are created when a worker
starts.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta, tzinfo
from typing import Any

from streamkit._core.errors import ConfigError
from streamkit._core.waiting import sleep_unless
from streamkit.agents.agent import Agent, AgentFn, Sink, faust_agent_name
from streamkit.agents.channel import Channel
from streamkit.agents.replies import Replies
from streamkit.app.conf import Settings
from streamkit.app.crontab import CronSchedule
from streamkit.app.services import Service
from streamkit.app.signals import Signal
from streamkit.app.views import View, ViewHandler, route_decorator
from streamkit.dsl.builders import KStream, KTable, table_stream
from streamkit.dsl.nodes import Pipeline, Source
from streamkit.dsl.plan import Plan, lower
from streamkit.faust.windows import FaustTable
from streamkit.tables.table import SetTable, Table
from streamkit.topics import ports
from streamkit.topics.topic import Sender, Topic, to_ms

_Table = Table  # the class, as annotations inside App (where ``Table`` is a method) name it


@dataclass(frozen=True, slots=True)
class Timer:
    fn: Callable[..., Awaitable[Any]]
    interval_ms: int
    name: str
    on_leader: bool = False  # run on one worker of the group only (the leader)
    takes_app: bool = False  # called with the app (Faust's timers may take it)


@dataclass(frozen=True, slots=True)
class CronJob:
    fn: Callable[..., Awaitable[Any]]
    schedule: CronSchedule  # a timezone of None reads the app's ``timezone`` setting, then UTC
    name: str
    on_leader: bool = False
    takes_app: bool = False


@dataclass(frozen=True)
class Command:
    """A command ``@app.command()`` adds to the app's command line (``app.main()``).

    ``options``: click's (or ``streamkit.cli``'s) ``option``/``argument`` decorators, in the
    order Faust takes them; ``takes_self``: the function's first parameter receives the
    command object (``self.app``, ``self.say()``), as Faust's does when it takes parameters."""

    name: str
    fn: Callable[..., Awaitable[Any]]
    options: tuple[Callable[[Any], Any], ...] = ()
    takes_self: bool = True
    help: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class App:
    """A stream-processing application.

    >>> import streamkit as sk
    >>> app = sk.App("shop", broker="file://./data")
    >>> orders = app.topic("orders", value_type=dict)
    >>> @app.agent(orders)
    ... async def count(stream):
    ...     async for order in stream:
    ...         pass
    >>> [a.name for a in app.agents.values()], app.dlq_topic.name
    (['count'], 'shop-dlq')
    """

    def __init__(self, id: str, **settings: Any) -> None:
        """``settings``: any of Faust's settings and streamkit's own (``streamkit.app.conf``):
        ``broker`` (``file://DIR``, the default ``file://.streamkit``, or
        ``kafka://host:port``), ``on_error`` (``"dlq"`` or ``"stop"``), ``commit_interval``
        (seconds), ``auto_offset_reset``, ``topic_partitions``, ``version``,
        ``value_serializer``, ...; all readable and writable on ``app.conf``. An unknown
        name is a ``ConfigError``."""
        self.conf = Settings(id, **settings)
        self.id = self.conf.id
        self.topics: dict[str, Topic] = {}
        self.agents: dict[str, Agent] = {}
        self.tables: dict[str, _Table] = {}
        self.topologies: list[Pipeline] = []  # declarative pipelines (app.stream), as data
        self.plans: list[Plan] = []  # each pipeline lowered into stages (``dsl/plan.py``)
        self.timers: list[Timer] = []
        self.tasks: list[Callable[[], Awaitable[Any]]] = []
        self.crontabs: list[CronJob] = []
        self.services: list[type[Service] | Service] = []
        self.commands: dict[str, Command] = {}
        self.pages: list[type[View]] = []
        self._stopping: asyncio.Event | None = None  # set by the worker when it stops
        self.sender: Sender | None = None
        self.replies: Replies | None = None  # agent RPC's reply consumer, set by a running worker
        self._reply_to: str | None = None
        # Faust's signals, sent by the worker (see ``streamkit.app.signals``).
        self.on_partitions_assigned = Signal("on_partitions_assigned")
        self.on_partitions_revoked = Signal("on_partitions_revoked")
        self.on_rebalance_complete = Signal("on_rebalance_complete")
        self.rebalancing = False  # True while the worker's partitions are being (re)assigned
        self.dlq_topic = self.topic(f"{self.id}-dlq", key_serializer="raw", value_serializer="raw", internal=True)

    # The settings the runtime reads, kept on ``app.conf`` so both spellings agree.
    @property
    def broker(self) -> str:
        return str(self.conf.broker)

    @broker.setter
    def broker(self, url: str) -> None:
        self.conf.broker = url

    @property
    def on_error(self) -> str:
        return str(self.conf.on_error)

    @property
    def commit_interval_ms(self) -> int:
        return self.conf.commit_interval_ms

    @property
    def processing_guarantee(self) -> str:
        """``at_least_once`` (the default) or ``exactly_once`` (``runtime/commits.py``)."""
        return str(self.conf.processing_guarantee)

    @property
    def exactly_once(self) -> bool:
        return bool(self.conf.processing_guarantee == "exactly_once")

    @property
    def auto_offset_reset(self) -> str:
        return str(self.conf.consumer_auto_offset_reset)

    @property
    def topic_partitions(self) -> int:
        return int(self.conf.topic_partitions)

    @property
    def max_agent_failures(self) -> int:
        """An agent failing this many times in a row without processing a record stops the worker."""
        return int(self.conf.max_agent_failures)

    @property
    def reply_to(self) -> str:
        """The topic replies to this app's ``agent.ask`` come to: ``conf.reply_to``, else
        ``conf.reply_to_prefix`` and a UUID drawn once per app (as Faust)."""
        if self.conf.reply_to:
            return str(self.conf.reply_to)
        if self._reply_to is None:
            self._reply_to = f"{self.conf.reply_to_prefix}{uuid.uuid4()}"
        return self._reply_to

    def __repr__(self) -> str:
        return f"<App {self.id!r} broker={self.broker!r}>"

    def topic(self, name: str, **options: Any) -> Topic:
        """Declare a topic (see ``Topic`` for the options); declaring twice returns the first."""
        existing = self.topics.get(name)
        if existing is not None:
            if options:
                _check_same(existing, Topic(self, name, **options), options)
            return existing
        topic = Topic(self, name, **options)
        self.topics[name] = topic
        return topic

    def Table(self, name: str, **options: Any) -> FaustTable:  # Faust spells it with a capital
        """Declare a table: keyed state, dict-like inside agents (see ``streamkit.tables``);
        ``.tumbling()``, ``.hopping()``, ``.sliding()``, ``.session()`` make it windowed
        (``streamkit.faust.windows``).

        Options: ``default`` (a callable, like ``int``), ``key_type``, ``value_type``,
        ``key_serializer``, ``value_serializer``, ``partitions``, ``store`` ("rocksdb" or
        "memory"), ``standby_replicas``, ``help``, ``on_window_close``.
        """
        table = self._declare_table(name, FaustTable, options)
        assert isinstance(table, FaustTable)
        return table

    def _declare_table(self, name: str, kind: type[_Table], options: dict[str, Any]) -> _Table:
        if name in self.tables:
            raise ConfigError(f"a table named {name!r} is already declared")
        table = self.tables[name] = kind(self, name, **options)
        return table

    def SetTable(self, name: str, **options: Any) -> _Table:  # Faust spells it with a capital
        """Declare a table of sets: ``table[k].add(v)`` and the other in-place set operations
        are written back like assignments (``streamkit.tables.table.SetTable``)."""
        return self._declare_table(name, SetTable, options)

    def GlobalTable(self, name: str, **options: Any) -> _Table:  # Faust spells it with a capital
        """Declare a global table: every worker holds all of it, kept current from its
        changelog, so any key can be looked up anywhere (joins with a key function, reference
        data). Writes inside an agent go to the event's partition, as for ``Table``."""
        return self._declare_table(name, Table, {**options, "is_global": True})

    def stream(self, topic: Topic | str | _Table | KTable) -> KStream:
        """A declarative stream of ``topic`` (or of a table's changes): see ``streamkit.dsl.builders``."""
        if isinstance(topic, (Table, KTable)):
            return table_stream(self, topic.table if isinstance(topic, KTable) else topic)
        return KStream(self, (Source(self.topic(topic) if isinstance(topic, str) else topic),))

    def _register_pipeline(self, pipeline: Pipeline, name: str) -> None:
        """Keep ``pipeline`` and its plan (named ``name``, after its table or sink topic); a
        worker compiles the plan's stages into agents when it starts."""
        taken = self._stage_names()
        plan = lower(self, pipeline, name)
        for stage in plan.stages:
            if stage.name in self.agents or stage.name in taken:
                raise ConfigError(
                    f"an agent named {stage.name!r} is already declared (pipelines are named after their table or topic)"
                )
        self.plans.append(plan)
        self.topologies.append(pipeline)

    def _stage_names(self) -> set[str]:
        return {stage.name for plan in self.plans for stage in plan.stages}

    def channel(self, *, key_type: Any = None, value_type: Any = None, maxsize: int | None = None) -> Channel:
        """An in-memory channel (``streamkit.agents.channel``): agents and iterations in this process
        read what is sent to it; nothing is stored."""
        return Channel(self, key_type=key_type, value_type=value_type, maxsize=maxsize)

    def agent(
        self,
        channel: Topic | Channel | Sequence[Topic] | str | None = None,
        *,
        name: str | None = None,
        sink: Sequence[Sink] | None = None,
        concurrency: int = 1,
        isolated_partitions: bool = False,
        use_reply_headers: bool = True,
        key_type: Any = None,
        value_type: Any = None,
        **topic_options: Any,
    ) -> Callable[[AgentFn], Agent]:
        """Decorate an async function over a stream of ``channel``: a topic (or its name, or
        several topics, merged), an in-memory channel (``app.channel()``), or nothing: then
        the agent's own topic ``{app id}-{name}``, named as Faust names it (see ``agents``),
        declared with ``key_type``, ``value_type`` and any other topic option given.

        ``isolated_partitions=True`` is accepted (each partition has its own instance here
        anyway); ``use_reply_headers=False`` (Faust's request envelope) is not offered."""
        if not use_reply_headers:
            raise ConfigError("use_reply_headers=False is not offered: RPC requests carry Faust's reply headers")
        declares = key_type is not None or value_type is not None or topic_options
        if declares and not (channel is None or isinstance(channel, str)):
            raise ConfigError("key_type/value_type and topic options apply to the agent's own topic: "
                              "declare them on the topic or channel given instead")

        def register(fn: AgentFn) -> Agent:
            agent_name = name or fn.__name__
            if agent_name in self.agents or agent_name in self._stage_names():
                raise ConfigError(f"an agent named {agent_name!r} is already declared")
            options = {"key_type": key_type, "value_type": value_type, **topic_options} if declares else {}
            reads: Channel | None = None
            if isinstance(channel, Channel):
                reads, topics = channel, []
            elif channel is None:
                own = f"{self.id}-{name or faust_agent_name(fn)}"
                topics = [self.topic(own, internal=True, **options)]
            elif isinstance(channel, (Topic, str)):
                topics = [self.topic(channel, **options) if isinstance(channel, str) else channel]
            else:
                topics = [self.topic(t) if isinstance(t, str) else t for t in channel]
                if not topics:
                    raise ConfigError(f"agent {agent_name!r} needs at least one topic")
            agent = Agent(
                self, fn, topics, name=agent_name, sinks=sink or (), concurrency=concurrency,
                channel=reads, isolated_partitions=isolated_partitions,
            )
            self.agents[agent_name] = agent
            return agent

        return register

    def main(self, argv: Sequence[str] | None = None) -> None:
        """Faust's entry point: ``python app.py worker -l info`` runs ``streamkit worker`` on
        this app (and so does every other app command: ``agents``, ``send``, ``tables``)."""
        import sys

        # The one call from a declaration up to the command line (Faust's entry point is the
        # app itself), through the port the command line installed (``topics/ports.py``).
        ports.run_command_line(self, list(sys.argv[1:] if argv is None else argv))

    def timer(
        self, interval: float, *, on_leader: bool = False
    ) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
        """Run an async callable every ``interval`` seconds while a worker runs; with
        ``on_leader=True`` only on the group's leader (the worker holding partition 0 of the
        app's first input). The callable may take the app (as Faust's may), or nothing; a
        ``functools.partial`` works too."""
        interval_ms = to_ms(interval, "timer interval")
        if not interval_ms:
            raise ConfigError("a timer needs an interval above 0 seconds")

        def register(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            self.timers.append(Timer(fn, interval_ms, _name_of(fn), on_leader, _takes_one_argument(fn)))
            return fn

        return register

    def task(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """Run an async callable once when a worker starts (called with the app when it takes
        one argument, as Faust's tasks may)."""
        self.tasks.append(functools.partial(fn, self) if _takes_one_argument(fn) else fn)
        return fn

    def crontab(
        self,
        cron_format: str,
        *,
        timezone: tzinfo | None = None,
        on_leader: bool = False,
        traced: bool = True,
    ) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
        """Run an async callable at the times of a cron line (``"30 18 * * *"``: 18:30 every
        day) while a worker runs, read in ``timezone`` (a ``tzinfo``; by default the app's
        ``timezone`` setting, else UTC); with ``on_leader=True`` only on the group's leader.
        The callable may take the app. ``traced`` is accepted as Faust's (no tracing here)."""
        schedule = CronSchedule(cron_format, timezone)

        def register(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            self.crontabs.append(CronJob(fn, schedule, _name_of(fn), on_leader, _takes_one_argument(fn)))
            return fn

        return register

    def cron_schedule(self, job: CronJob) -> CronSchedule:
        """``job``'s schedule, in the app's ``timezone`` setting when the job names none."""
        default = self.conf.timezone
        if job.schedule.timezone is not None or default is None:
            return job.schedule
        return CronSchedule(job.schedule.cron_format, default)

    def service(self, service: Any) -> Any:
        """Start a ``Service`` (a class, constructed with no arguments, or an instance) with
        every worker of the app, after its tasks; it stops first when the worker stops."""
        if not (isinstance(service, Service) or (isinstance(service, type) and issubclass(service, Service))):
            raise ConfigError(f"@app.service takes a streamkit Service class or instance, not {service!r}")
        self.services.append(service)
        return service

    @property
    def should_stop(self) -> bool:
        """True once the worker running the app is stopping (tasks that loop check it)."""
        return self._stopping is not None and self._stopping.is_set()

    async def sleep(self, seconds: float | timedelta) -> None:
        """Sleep ``seconds``, or less when the worker stops meanwhile."""
        delay = seconds.total_seconds() if isinstance(seconds, timedelta) else float(seconds)
        if delay < 0:
            raise ConfigError(f"cannot sleep {seconds!r} seconds")
        await sleep_unless(self._stopping, delay)

    def _run_began(self) -> None:
        """Called by the worker as it starts: ``should_stop`` is False until it stops."""
        self._stopping = asyncio.Event()

    def _run_stopping(self) -> None:
        """Called by the worker as it stops: wakes every ``app.sleep``."""
        if self._stopping is None:
            self._stopping = asyncio.Event()
        self._stopping.set()

    def command(
        self, *options: Callable[[Any], Any], base: Any = None, **kwargs: Any
    ) -> Callable[[Callable[..., Awaitable[Any]]], Command]:
        """Add ``async def NAME(self, ...)`` as a subcommand of the app's command line
        (``python app.py NAME ...``); ``options`` are ``streamkit.cli.option``/``argument``
        (click's). The command runs with the app's producer, so it may send to topics; the
        function takes ``self`` (``self.app``, ``self.say(...)``) unless it takes no
        parameters at all. Underscores in the name become dashes, as click names commands."""
        if base is not None:
            raise ConfigError("@app.command(base=...) is not offered: commands are async functions")

        def register(fn: Callable[..., Awaitable[Any]]) -> Command:
            if not inspect.iscoroutinefunction(fn):
                raise ConfigError(f"@app.command needs an async function, not {fn!r}")
            name = str(kwargs.pop("name", None) or fn.__name__.lower().replace("_", "-"))
            if name in self.commands:
                raise ConfigError(f"a command named {name!r} is already declared")
            takes_self = bool(inspect.signature(fn).parameters)
            command = Command(name, fn, tuple(options), takes_self, kwargs.pop("help", None) or fn.__doc__, dict(kwargs))
            self.commands[name] = command
            return command

        return register

    def page(
        self, path: str, *, base: type[View] = View, cors_options: Any = None, name: str | None = None
    ) -> Callable[[Any], type[View]]:
        """Serve a view at ``path`` (aiohttp's patterns: ``/count/{word}/``) on the worker's
        web port beside its HTTP API: an ``async def view(web, request, **params)`` answering
        GET with ``web.json(...)``, or a ``View`` subclass with ``get``/``post``/...
        (``streamkit.app.views``). ``cors_options`` is accepted as Faust's, with no effect."""
        if not isinstance(path, str) or not path.startswith("/"):
            raise ConfigError(f"a page's path must start with '/', not {path!r}")

        def register(fun: Any) -> type[View]:
            if isinstance(fun, type):
                if not issubclass(fun, View):
                    raise ConfigError(f"@app.page on a class needs a streamkit.app.views.View subclass, not {fun!r}")
                view: type[View] = fun
            else:
                view = base.from_handler(fun)
            view.view_name = name or view.__name__
            view.view_path = path
            if any(p.view_path == path for p in self.pages):
                raise ConfigError(f"a page at {path!r} is already declared")
            self.pages.append(view)
            return view

        return register

    def table_route(
        self,
        table: _Table,
        shard_param: str | None = None,
        *,
        query_param: str | None = None,
        match_info: str | None = None,
        exact_key: str | None = None,
    ) -> Callable[[ViewHandler], ViewHandler]:
        """Run the decorated view method on the worker holding the key of ``table`` named by
        the path's ``{match_info}``, the query's ``query_param`` or ``exact_key`` (a key held
        here is answered here; otherwise the request goes to the owner of its partition)."""
        return route_decorator(
            "table", table, query_param=query_param or shard_param, match_info=match_info, exact_key=exact_key
        )

    def topic_route(
        self,
        topic: Topic,
        shard_param: str | None = None,
        *,
        query_param: str | None = None,
        match_info: str | None = None,
        exact_key: str | None = None,
    ) -> Callable[[ViewHandler], ViewHandler]:
        """Run the decorated view method on the worker that consumes the partition of
        ``topic`` the key falls in (the key as the topic's key serializer writes it)."""
        return route_decorator(
            "topic", topic, query_param=query_param or shard_param, match_info=match_info, exact_key=exact_key
        )


def _name_of(fn: Any) -> str:
    return str(getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", None) or repr(fn))


def _takes_one_argument(fn: Any) -> bool:
    """Whether ``fn`` wants one positional argument (the app), as Faust's timers and tasks may."""
    try:
        params = [
            p for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
    except (TypeError, ValueError):
        return False
    return len(params) == 1


def _check_same(existing: Topic, again: Topic, options: dict[str, Any]) -> None:
    """A topic declared twice must not differ in what the second declaration states: the
    first one is what every declaration gets, so a silent difference would mean records
    written or read with the wrong serializer or settings."""
    differences = []
    if "key_type" in options and again.key_type is not existing.key_type:
        differences.append("key type")
    if "value_type" in options and again.value_type is not existing.value_type:
        differences.append("value type")
    if ("key_serializer" in options or "key_type" in options) and again.key_serde.name != existing.key_serde.name:
        differences.append(f"key serializer {existing.key_serde.name} vs {again.key_serde.name}")
    if ("value_serializer" in options or "value_type" in options) and again.value_serde.name != existing.value_serde.name:
        differences.append(f"value serializer {existing.value_serde.name} vs {again.value_serde.name}")
    if options.get("partitions") is not None and again.partitions != existing.partitions:
        differences.append(f"partitions {existing.partitions} vs {again.partitions}")
    if {"retention", "compacted", "deleting", "config"} & options.keys() and again.config != existing.config:
        differences.append(f"config {existing.config} vs {again.config}")
    if differences:
        raise ConfigError(f"topic {existing.name!r} is already declared with another " + ", ".join(differences))
