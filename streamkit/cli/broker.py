"""``streamkit broker``: serve a data directory to Kafka clients until SIGTERM or SIGINT.

Once listening it prints one line, ``streamkit broker listening on HOST:PORT (data: DIR)``,
to stdout and flushes it (with ``--port 0`` the port is the one picked; HOST:PORT is the first
listener's), so scripts and tests can wait for it (``--durable`` adds ", durable: fsync before
acknowledging"; with ``--listener`` or a ``--config`` file it adds "; listeners NAME://HOST:PORT
..." with every listener's bound port). SIGTERM and SIGINT shut down cleanly: the log is
flushed and closed.

Security (docs/security.md, "Securing streamkit broker"): ``--listener NAME://HOST:PORT``
(repeatable; Kafka's syntax) or ``listeners`` in a ``--config`` server.properties file replace
``--host/--port``; TLS and SASL settings come from the same file or the ``--ssl-*`` and
``--sasl-enabled-mechanisms`` options (the options win). A listener that would serve
unauthenticated clients on a non-loopback address is refused with one line and exit code 2
unless ``--allow-insecure``; so is a damaged credential file.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from streamkit._core.errors import ConfigError, StreamkitError
from streamkit.cli.common import InputError
from streamkit.log.server import Broker, BrokerConfig
from streamkit.log.server.errors import CredentialStoreError
from streamkit.log.server.listeners import TlsSettings, check_secure, parse_listeners
from streamkit.log.server.server_properties import read_server_properties


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
@click.option("--config", "config_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=None, help="A Kafka server.properties file (listeners, ssl.*, sasl.enabled.mechanisms, ...).")
@click.option("--override", "overrides", multiple=True, metavar="NAME=VALUE",
              help="A server.properties setting over --config's (Kafka's --override), e.g. "
              "log.retention.ms=-1; repeatable.")
@click.option("--listener", "listener_specs", multiple=True, metavar="NAME://HOST:PORT",
              help="A listener in Kafka's syntax, e.g. SASL_SSL://127.0.0.1:9093 (repeatable; replaces --host/--port).")
@click.option("--advertised-listener", "advertised_specs", multiple=True, metavar="NAME://HOST:PORT",
              help="The address clients of listener NAME are told to connect to (repeatable).")
@click.option("--ssl-keystore", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PEM file with the server's private key and certificate chain (ssl.keystore.location).")
@click.option("--ssl-truststore", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="PEM file of the CAs client certificates must chain to (ssl.truststore.location).")
@click.option("--ssl-client-auth", type=click.Choice(["none", "requested", "required"]), default=None,
              help="Ask TLS clients for a certificate (ssl.client.auth; default none).")
@click.option("--sasl-enabled-mechanisms", default=None, metavar="LIST",
              help="Comma-separated SASL mechanisms (default SCRAM-SHA-256,SCRAM-SHA-512,PLAIN).")
@click.option("--allow-insecure", is_flag=True,
              help="Serve PLAINTEXT (or SSL without client certificates) on a non-loopback address.")
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
    config_file: Path | None,
    overrides: tuple[str, ...],
    listener_specs: tuple[str, ...],
    advertised_specs: tuple[str, ...],
    ssl_keystore: Path | None,
    ssl_truststore: Path | None,
    ssl_client_auth: str | None,
    sasl_enabled_mechanisms: str | None,
    allow_insecure: bool,
    log_level: str,
) -> None:
    """Serve the log in --data-dir to Kafka clients over the Kafka wire protocol."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    ctx = click.get_current_context()
    try:
        settings: dict[str, Any] = {}
        if config_file is not None or overrides:
            source = str(config_file) if config_file is not None else "--override"
            props = read_server_properties(
                config_file.read_text() if config_file is not None else "", source,
                config_file.parent if config_file is not None else Path.cwd(), _overrides(overrides),
            )
            settings.update(props.settings)
            for key in props.unknown:
                logging.getLogger(__name__).warning("%s: %s is not used by streamkit broker", source, key)
            if props.data_dir is not None and _default(ctx, "data_dir"):
                data_dir = props.data_dir
        # An option given on the command line beats the file.
        for name, value in (
            ("auto_create_topics", auto_create_topics), ("transactions", transactions),
            ("default_partitions", default_partitions), ("durable", durable),
            ("max_connections", max_connections), ("request_timeout_ms", request_timeout_ms),
            ("connections_max_idle_ms", connections_max_idle_ms),
        ):
            if not _default(ctx, name) or name not in settings:
                settings[name] = value
        if listener_specs:
            settings["listeners"] = parse_listeners(list(listener_specs), advertised=list(advertised_specs))
        elif advertised_specs:
            raise ConfigError("--advertised-listener needs --listener")
        settings["tls"] = _tls(settings.get("tls"), ssl_keystore, ssl_truststore, ssl_client_auth)
        if sasl_enabled_mechanisms is not None:
            settings["sasl_mechanisms"] = tuple(
                m.strip().upper() for m in sasl_enabled_mechanisms.split(",") if m.strip()
            )
        if authorizer:
            settings["authorizer"] = True
        if super_users:
            settings["super_users"] = frozenset(super_users)
        if allow_everyone_if_no_acl_found:
            settings["allow_everyone_if_no_acl_found"] = True
        config = BrokerConfig(host=host, port=port, advertised_host=advertised_host, **settings)
        check_secure(config.effective_listeners, config.tls, config.sasl_mechanisms, allow_insecure=allow_insecure)
        asyncio.run(_serve(data_dir, config))
    except (ConfigError, CredentialStoreError) as exc:
        raise InputError(str(exc)) from exc
    except StreamkitError as exc:
        raise click.ClickException(str(exc)) from exc
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def _overrides(pairs: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--override takes NAME=VALUE, not {pair!r}")
        out[name.strip()] = value.strip()
    return out


def _default(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) in (ParameterSource.DEFAULT, None)


def _tls(
    base: TlsSettings | None, keystore: Path | None, truststore: Path | None, client_auth: str | None
) -> TlsSettings | None:
    if base is None and keystore is None and truststore is None and client_auth is None:
        return None
    values: dict[str, Any] = {}
    if base is not None:
        values = {
            "keystore": base.keystore, "certificate": base.certificate, "key": base.key,
            "key_password": base.key_password, "truststore": base.truststore, "client_auth": base.client_auth,
        }
    if keystore is not None:
        values.update(keystore=keystore, certificate=None, key=None)
    if truststore is not None:
        values["truststore"] = truststore
    if client_auth is not None:
        values["client_auth"] = client_auth
    return TlsSettings(**values)


async def _serve(data_dir: Path, config: BrokerConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with Broker(data_dir, config) as broker:
        line = f"streamkit broker listening on {broker.host}:{broker.port} (data: {data_dir})"
        if config.durable:
            line += ", durable: fsync before acknowledging"
        if config.listeners:
            ports = broker.ports
            line += "; listeners " + " ".join(
                f"{lst.name}://{lst.host}:{ports[lst.name]}" for lst in config.listeners
            )
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        await stop.wait()


if __name__ == "__main__":
    broker_command()
