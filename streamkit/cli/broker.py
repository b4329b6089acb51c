"""``streamkit broker``: serve a data directory to Kafka clients until SIGTERM or SIGINT.

Once listening it prints one line, ``streamkit broker listening on HOST:PORT (data: DIR)``,
to stdout and flushes it (with ``--port 0`` the port is the one picked), so scripts and
tests can wait for it (``--durable`` adds ", durable: fsync before acknowledging"). SIGTERM and SIGINT shut down cleanly: the log is flushed and closed.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

import click

from streamkit._core.errors import StreamkitError
from streamkit.log.server import Broker, BrokerConfig


@click.command("broker")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".streamkit"),
              show_default=True, help="Data directory of the log.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=9092, show_default=True,
              help="Port to listen on (0 picks a free one).")
@click.option("--advertised-host", default=None,
              help="Host clients are told to connect to (default: --host).")
@click.option("--auto-create-topics/--no-auto-create-topics", default=True, show_default=True,
              help="Create unknown topics when a client asks for their metadata.")
@click.option("--transactions/--no-transactions", default=True, show_default=True,
              help="Serve the transaction APIs (exactly-once producers).")
@click.option("--default-partitions", type=click.IntRange(1, 10_000), default=1, show_default=True,
              help="Partitions of auto-created topics and of CreateTopics with -1.")
@click.option("--durable", is_flag=True,
              help="Acknowledge produced records (acks 1 or all) only once they are fsynced; "
              "concurrent producers share fsyncs. Default: acknowledged means in the page cache, "
              "on disk within the topic's flush.ms.")
@click.option("--max-connections", type=click.IntRange(1, 1_000_000), default=1024, show_default=True,
              help="Connections served at once; more are closed as they arrive.")
@click.option("--request-timeout-ms", type=click.IntRange(min=1), default=30_000, show_default=True,
              help="Close a connection whose request has not arrived whole this long after it began.")
@click.option("--connections-max-idle-ms", type=click.IntRange(min=1), default=600_000, show_default=True,
              help="Close a connection that sends no request (and has none running) this long.")
@click.option("--authorizer", is_flag=True,
              help="Enforce Kafka's ACLs (kept in DATA_DIR/.broker/acls.json; managed with kafka-acls, "
              "the AdminClient or `streamkit acls`). Default: everything is allowed.")
@click.option("--super-user", "super_users", multiple=True, metavar="PRINCIPAL",
              help="A principal (User:NAME) allowed everything, as Kafka's super.users; repeatable.")
@click.option("--allow-everyone-if-no-acl-found", is_flag=True,
              help="Allow an action on a resource that no ACL names (Kafka's allow.everyone.if.no.acl.found).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="warning", show_default=True)
def broker_command(
    data_dir: Path,
    host: str,
    port: int,
    advertised_host: str | None,
    auto_create_topics: bool,
    transactions: bool,
    default_partitions: int,
    durable: bool,
    max_connections: int,
    request_timeout_ms: int,
    connections_max_idle_ms: int,
    authorizer: bool,
    super_users: tuple[str, ...],
    allow_everyone_if_no_acl_found: bool,
    log_level: str,
) -> None:
    """Serve the log in --data-dir to Kafka clients over the Kafka wire protocol."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = BrokerConfig(
            host=host,
            port=port,
            advertised_host=advertised_host,
            auto_create_topics=auto_create_topics,
            transactions=transactions,
            default_partitions=default_partitions,
            durable=durable,
            max_connections=max_connections,
            request_timeout_ms=request_timeout_ms,
            connections_max_idle_ms=connections_max_idle_ms,
            authorizer=authorizer,
            super_users=frozenset(super_users),
            allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found,
        )
        asyncio.run(_serve(data_dir, config))
    except StreamkitError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


async def _serve(data_dir: Path, config: BrokerConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with Broker(data_dir, config) as broker:
        sys.stdout.write(
            f"streamkit broker listening on {broker.host}:{broker.port} (data: {data_dir})"
            + (", durable: fsync before acknowledging\n" if config.durable else "\n")
        )
        sys.stdout.flush()
        await stop.wait()


if __name__ == "__main__":
    broker_command()
