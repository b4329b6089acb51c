"""Commands that run or inspect a user's app: ``worker``, ``agents``, ``send``.

Each takes ``-A module:attribute`` naming an ``App`` (the current directory is importable, as
with ``python -m``). ``--broker`` overrides the app's own broker URL; ``--command-config FILE``
(Kafka's client properties: TLS, SASL) goes over the app's ``broker_credentials`` and the
environment's settings, name by name (``transport/security.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from streamkit._core.clock import SYSTEM_CLOCK
from streamkit._core.errors import ConfigError
from streamkit._core.refs import import_ref
from streamkit._core.serde import SerdeError
from streamkit.app.application import App
from streamkit.cli.common import command_config_option, info
from streamkit.cli.statedir import default_state_dir, forget_web_url, record_web_url
from streamkit.log.errors import DataDirLockedError
from streamkit.runtime.probe import discover
from streamkit.runtime.sender import RuntimeSender
from streamkit.runtime.stages import install_plans
from streamkit.runtime.worker import Worker
from streamkit.topics.topic import Topic
from streamkit.transport.base import TransportError
from streamkit.transport.connect import open_log_client
from streamkit.transport.options import ClientOptions
from streamkit.transport.security import ClientSecurity, read_properties_file
from streamkit.web import WebServer

LOG_LEVELS = ("debug", "info", "warning", "error")
WAIT_FOR_DATA_DIR_S = 0.5
JOIN_RETRY_S = 30.0


def load_app(ref: str) -> App:
    """The ``App`` named by ``module:attribute``."""
    try:
        app = import_ref(ref)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="-A/--app") from exc
    if not isinstance(app, App):
        raise click.BadParameter(f"{ref!r} is {type(app).__name__}, not a streamkit App", param_hint="-A/--app")
    return app


app_option = click.option("-A", "--app", "app_ref", required=True, metavar="MODULE:APP", help="The app to use.")
broker_option = click.option(
    "--broker",
    default=None,
    metavar="URL",
    help="Override the app's broker: file://DIR (embedded) or kafka://HOST:PORT[,HOST:PORT].",
)


@click.command("worker")
@app_option
@broker_option
@command_config_option
@click.option("--loglevel", "-l", type=click.Choice(LOG_LEVELS), default="info", show_default=True)
@click.option(
    "--web-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve the worker's HTTP API (/status, /topology, /metrics, /health) on this port; 0 picks one.",
)
@click.option("--web-host", default="127.0.0.1", show_default=True, help="Address of the HTTP API.")
@click.option(
    "--state-dir",
    default=None,
    metavar="DIR",
    help="Where the tables' local state lives (default .streamkit-state/APP_ID).",
)
@click.option(
    "--processing-guarantee",
    type=click.Choice(["at_least_once", "exactly_once"]),
    default=None,
    help="Override the app's processing_guarantee (exactly_once: outputs, changelogs and offsets "
    "commit in one transaction per commit interval).",
)
@click.option(
    "--progress-interval",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Seconds between progress lines (records/s, lag); 0 turns them off.",
)
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="How long a stop may wait for the log (commits, transactions, leaving the group) before it "
    "gives up what is left and exits [default: the app's shutdown_timeout setting, 30].",
)
def worker(
    app_ref: str,
    broker: str | None,
    web_port: int | None,
    web_host: str,
    state_dir: str | None,
    loglevel: str,
    progress_interval: float,
    processing_guarantee: str | None = None,
    shutdown_timeout: float | None = None,
    command_config: Path | None = None,
) -> None:
    """Run an app's agents, timers and tasks until SIGTERM or Ctrl-C.

    A graceful stop commits every processed offset before it exits. It waits for the log at
    most --shutdown-timeout seconds: past that (a broker gone or hung) it gives up what is
    left, says so in one line, and exits as any stop does. A stop asked for while the worker
    still starts ends the start.
    On an embedded data directory another process owns, the worker joins that process's
    log as a Kafka client (workers of one app share its partitions) and takes the directory
    over when it stops.
    """
    app = load_app(app_ref)
    if processing_guarantee is not None:
        app.conf.processing_guarantee = processing_guarantee
    if shutdown_timeout is not None:
        app.conf.shutdown_timeout = shutdown_timeout
    logging.basicConfig(
        level=getattr(logging, loglevel.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # A worker allocates many short-lived objects per record; collecting the oldest
    # generation less often measured +7-9% events/s (benchmarks/engine_bench.py).
    gc.set_threshold(700, 10, 100)
    options = client_options(app, command_config)
    asyncio.run(_run_worker(app, broker, progress_interval, web_host, web_port, state_dir, options))


def client_options(app: App, command_config: Path | None) -> ClientOptions:
    """The app's Kafka client settings, with ``--command-config``'s TLS and SASL over its own."""
    options = app.conf.client_options()
    if command_config is None:
        return options
    security: ClientSecurity = options.security.layered(
        read_properties_file(command_config), source=f" (in {command_config})"
    )
    return dataclasses.replace(options, security=security)


async def _run_worker(
    app: App, broker: str | None, progress_interval: float, web_host: str, web_port: int | None,
    state_dir: str | None = None, options: ClientOptions | None = None,
) -> None:
    state_dir = state_dir or default_state_dir(app)
    worker = Worker(app, broker=broker, state_dir=state_dir, options=options)
    web = WebServer(worker, host=web_host, port=web_port) if web_port is not None else None
    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()

    def again() -> Worker:
        """A new worker for another try at the start; signals reach the newest one."""
        nonlocal worker
        worker = Worker(app, broker=broker, state_dir=state_dir, options=options)
        return worker

    def request_stop() -> None:
        stop_requested.set()
        worker.request_stop()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, request_stop)
    try:
        if web is not None:
            # Serving first: the worker tells its group this address when it joins.
            await web.start()
            worker.advertised_url = web.url
        if await _start(worker, again, web, stop_requested):
            _banner(app, worker)
            if web is not None:
                info(f"  web: {web.url}")
                record_web_url(state_dir, web.url)
            progress = asyncio.ensure_future(_progress(worker, progress_interval)) if progress_interval else None
            try:
                await worker.wait()
            finally:
                if progress is not None:
                    progress.cancel()
    finally:
        info("streamkit worker: stopping (committing processed offsets)")
        if web is not None:
            forget_web_url(state_dir)
            await web.aclose()
        await worker.stop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    info(f"streamkit worker: stopped after {worker.stats.records_in} records")


async def _start(
    worker: Worker, again: Callable[[], Worker], web: WebServer | None, stop_requested: asyncio.Event
) -> bool:
    """Start ``worker``; False when a stop was asked for first. While its embedded data
    directory is held by another process that does not serve it (a command that opened it, a
    reader, a worker that is opening it), say so, wait, and try again with a new worker from
    ``again``: it takes the directory, or joins the process that serves it by then. /health
    answers 503 meanwhile."""
    said = ""
    give_up = 0.0
    while True:
        try:
            return await _start_once(worker)
        except DataDirLockedError as exc:
            if str(exc) != said:
                said = str(exc)
                info(f"streamkit worker: {exc}: waiting (this worker has no log meanwhile)")
            await worker.stop()
        except TransportError as exc:
            from streamkit.transport.attached import AttachedLogClient  # aiokafka: only when needed

            client = worker.client
            if not isinstance(client, AttachedLogClient):
                raise
            # The owner it joined went away (or is going) while it started: start again on
            # whoever owns the directory now, or take it. An owner that stays and does not
            # answer for JOIN_RETRY_S is an error.
            now = asyncio.get_running_loop().time()
            give_up = give_up or now + JOIN_RETRY_S
            if now > give_up and not client.owner_changed():
                raise
            said = f"the owner of data directory {client.data_dir} did not answer while this worker started ({exc})"
            info(f"streamkit worker: {said}: starting again")
            await worker.stop()
        # The next try's worker serves /health at once: 503 'waiting', with the reason.
        worker = again()
        worker.log_waiting = said
        if web is not None:
            web.worker = worker
            worker.advertised_url = web.url
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop_requested.wait(), WAIT_FOR_DATA_DIR_S)
        if stop_requested.is_set():
            info("streamkit worker: asked to stop while starting")
            return False


async def _start_once(worker: Worker) -> bool:
    """Start ``worker``; False when a stop was asked for first (SIGTERM or Ctrl-C while the
    start still waited for the log, say a broker that accepts connections and answers
    nothing): the start is cancelled, and what it opened closes without waiting for the log.
    A failure of either is raised."""
    starting = asyncio.ensure_future(worker.start())
    stopping = asyncio.ensure_future(worker.wait())
    await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
    if starting.done():
        stopping.cancel()
        await asyncio.gather(stopping, return_exceptions=True)
        starting.result()
        return True
    starting.cancel()
    await asyncio.gather(starting, return_exceptions=True)
    stopping.result()  # the failure that stopped it, if one did
    info("streamkit worker: asked to stop while starting")
    return False

def _banner(app: App, worker: Worker) -> None:
    info(f"streamkit worker: app {app.id!r} on {worker.client.url} ({app.processing_guarantee})")
    info(f"  topics: {', '.join(sorted(app.topics)) or '-'}")
    for agent in app.agents.values():
        sinks = ", ".join(getattr(s, "name", repr(s)) for s in agent.sinks)
        info(
            f"  agent {agent.name}: {', '.join(t.name for t in agent.topics)}"
            + (f" -> {sinks}" if sinks else "")
            + (f" (concurrency {agent.concurrency})" if agent.concurrency > 1 else "")
        )
    info(
        f"  timers: {len(app.timers)}, cron jobs: {len(app.crontabs)}, tasks: {len(app.tasks)}, "
        f"services: {len(app.services)}, pages: {len(app.pages)}; dead letters go to {app.dlq_topic.name}"
    )
    served = getattr(worker.client, "served_at", None)
    if served:
        info(f"  serving the embedded log at {served} (other streamkit commands on this data directory use it)")


async def _progress(worker: Worker, interval: float) -> None:
    last_count = worker.stats.records_in
    last_time = time.monotonic()
    while True:
        await asyncio.sleep(interval)
        now = time.monotonic()
        count = worker.stats.records_in
        rate = (count - last_count) / max(now - last_time, 1e-9)
        last_count, last_time = count, now
        lag = worker.lag()
        lag_text = " ".join(f"{tp.topic}-{tp.partition}={n}" for tp, n in sorted(lag.items())) or "-"
        info(f"[progress] {count} records in ({rate:,.0f}/s), dead letters {worker.stats.dead_lettered}, lag {lag_text}")


@click.command("agents")
@app_option
def agents(app_ref: str) -> None:
    """List an app's agents with their input topics, repartition topics and sinks."""
    app = load_app(app_ref)
    rows = asyncio.run(_describe_agents(app))
    if not rows:
        info(f"app {app.id!r} declares no agents")
        return
    width = max(len(r[0]) for r in rows)
    click.echo(f"{'AGENT':<{width}}  TOPICS  ->  SINKS")
    for name, topics, sinks in rows:
        click.echo(f"{name:<{width}}  {topics}  ->  {sinks or '-'}")


async def _describe_agents(app: App) -> list[tuple[str, str, str]]:
    install_plans(app)  # the DSL's stages, as a worker runs them
    rows = []
    for agent in app.agents.values():
        hops = await discover(agent)
        inputs = [t.name for t in agent.topics]
        for hop in hops:
            inputs.append(hop.topic.name if hop.topic is not None else agent.repartition_topic_name(hop.name))
        sinks = ", ".join(getattr(s, "name", getattr(s, "__name__", repr(s))) for s in agent.sinks)
        rows.append((agent.name, ", ".join(inputs), sinks))
    return rows


@click.command("send")
@app_option
@broker_option
@command_config_option
@click.argument("topic")
@click.argument("value")
@click.option("--key", "-k", default=None, help="The record key (parsed with the topic's key serializer).")
@click.option("--partition", "-p", type=click.IntRange(min=0), default=None)
def send(
    app_ref: str, broker: str | None, topic: str, value: str, key: str | None, partition: int | None,
    command_config: Path | None = None,
) -> None:
    """Send one record to TOPIC, serialized as the app declares it (JSON for typed values)."""
    app = load_app(app_ref)
    target = app.topics.get(topic)
    if target is None:
        declared = ", ".join(sorted(app.topics))
        raise click.BadParameter(
            f"app {app.id!r} declares no topic {topic!r} (it declares: {declared}); "
            "declare it with app.topic() first",
            param_hint="TOPIC",
        )
    try:
        parsed_value = target.value_serde.loads(value.encode())
        parsed_key = None if key is None else target.key_serde.loads(key.encode())
    except SerdeError as exc:
        raise click.BadParameter(f"does not fit topic {topic!r}: {exc}", param_hint="VALUE/--key") from exc
    options = client_options(app, command_config)
    name, part, offset = asyncio.run(_send_one(app, broker, target, parsed_key, parsed_value, partition, options))
    click.echo(f"{name}-{part}@{offset}")


async def _send_one(
    app: App, broker: str | None, topic: Topic, key: Any, value: Any, partition: int | None, options: ClientOptions
) -> tuple[str, int, int]:
    client = open_log_client(broker or app.broker, options=options)
    await client.start()
    try:
        producer = client.producer()
        await producer.start()
        try:
            count = await client.ensure_topic(topic.name, topic.partitions or app.topic_partitions, topic.config)

            async def partitions(_topic: Topic) -> int:
                return count

            sender = RuntimeSender(producer, SYSTEM_CLOCK, partitions)
            pending = await sender.send(topic, key=key, value=value, headers=None, timestamp_ms=None, partition=partition)
            sent = await pending
            return sent.topic, sent.partition, sent.offset
        finally:
            await producer.aclose()
    finally:
        await client.aclose()
