"""``streamkit tables list|get|scan``: query an app's tables.

Through a running worker's HTTP API when one answers (``--url``, or the address a worker with
``--web-port`` records in its state directory), else straight from the state directory, opened
read-only (RocksDB tables only: the values as of the last commit of the last worker).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import click

from streamkit.app.application import App
from streamkit.cli.apps import app_option, load_app
from streamkit.cli.statedir import default_state_dir, recorded_web_url
from streamkit.tables import query
from streamkit.tables.errors import CorruptStateError, StateLockedError
from streamkit.tables.partition import TablePartition
from streamkit.tables.store import RocksStore
from streamkit.tables.table import Table

state_dir_option = click.option(
    "--state-dir", default=None, metavar="DIR", help="The app's state directory (default .streamkit-state/APP_ID)."
)
url_option = click.option("--url", default=None, metavar="URL", help="A running worker's HTTP API (its --web-port).")


@click.group("tables")
def tables() -> None:
    """Query an app's tables: through a running worker, or its state directory."""


@tables.command("list")
@app_option
@state_dir_option
@url_option
def list_(app_ref: str, state_dir: str | None, url: str | None) -> None:
    """The app's tables, with the partitions held and their keys."""
    app = load_app(app_ref)
    base = url or recorded_web_url(state_dir or default_state_dir(app))
    if base is not None:
        listing = _http_get(base, "/tables")["tables"]
    else:
        listing = [_local_listing(app, t, state_dir or default_state_dir(app)) for t in app.tables.values()]
    for entry in listing:
        held = entry.get("held", [])
        keys = sum(p.get("keys") or 0 for p in held)
        parts = ",".join(str(p["partition"]) for p in held) or "-"
        click.echo(f"{entry['name']}\tpartitions held: {parts}\tkeys: ~{keys}\tchangelog: {entry['changelog']}")


@tables.command("get")
@app_option
@click.argument("name")
@click.argument("key")
@state_dir_option
@url_option
def get(app_ref: str, name: str, key: str, state_dir: str | None, url: str | None) -> None:
    """Print ``{"key": ..., "value": ...}`` for KEY of table NAME (exit 1 when absent).

    KEY is read by the table's key type; for an untyped table as JSON first, then as text:
    ``0`` is the integer 0 if that is a key, else the string "0" (``'"0"'`` is only the string).
    """
    app = load_app(app_ref)
    base = url or recorded_web_url(state_dir or default_state_dir(app))
    if base is not None:
        found = _http_get(base, f"/tables/{urllib.parse.quote(name, safe='')}/{urllib.parse.quote(key, safe='')}")
    else:
        table = _open_local(app, name, state_dir or default_state_dir(app))
        try:
            found = query.lookup(table, key)
        except query.QueryError as exc:
            raise _error(exc) from None
        finally:
            _close_local(table)
    click.echo(json.dumps({"key": found["key"], "value": found["value"]}))


@tables.command("scan")
@app_option
@click.argument("name")
@click.option("--prefix", default="", help="Only keys starting with this text.")
@click.option("--limit", type=click.IntRange(1, query.MAX_SCAN), default=100, show_default=True)
@state_dir_option
@url_option
def scan(app_ref: str, name: str, prefix: str, limit: int, state_dir: str | None, url: str | None) -> None:
    """Print the keys and values of table NAME, one JSON object per line."""
    app = load_app(app_ref)
    base = url or recorded_web_url(state_dir or default_state_dir(app))
    if base is not None:
        params = urllib.parse.urlencode({"prefix": prefix, "limit": limit})
        rows = _http_get(base, f"/tables/{urllib.parse.quote(name, safe='')}?{params}")
    else:
        table = _open_local(app, name, state_dir or default_state_dir(app))
        try:
            rows = query.scan(table, prefix, limit)
        except query.QueryError as exc:
            raise _error(exc) from None
        finally:
            _close_local(table)
    for row in rows:
        click.echo(json.dumps(row))


class _NotFound(click.ClickException):
    exit_code = 1  # like grep: the answer is "no such key"


class _Refused(click.ClickException):
    exit_code = 2  # the query cannot run as asked


def _error(exc: query.QueryError) -> click.ClickException:
    return _NotFound(exc.message) if exc.status == 404 else _Refused(exc.message)


def _http_get(base: str, path: str) -> Any:
    try:
        with urllib.request.urlopen(base.rstrip("/") + path, timeout=10) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        try:
            message = json.load(exc).get("error", exc.reason)
        except ValueError:
            message = exc.reason
        raise (_NotFound(str(message)) if exc.code == 404 else _Refused(str(message))) from None
    except (urllib.error.URLError, OSError) as exc:
        raise click.ClickException(f"cannot reach the worker at {base}: {exc}") from None


def _partition_dirs(table: Table, state_dir: str) -> list[int]:
    root = os.path.join(state_dir, table.name)
    if not os.path.isdir(root):
        return []
    return sorted(int(d) for d in os.listdir(root) if d.isdigit())


def _open_local(app: App, name: str, state_dir: str) -> Table:
    try:
        table = query.find_table(app.tables, name)
    except query.QueryError as exc:
        raise _error(exc) from None
    if table.store_kind != "rocksdb":
        raise _Refused(f"table {name!r} is kept in memory: query a running worker with --url")
    partitions = _partition_dirs(table, state_dir)
    if not partitions:
        raise _Refused(f"no state of table {name!r} in {state_dir} (no worker of the app ran here?)")
    for p in partitions:
        path = os.path.join(state_dir, table.name, str(p))
        try:
            store = RocksStore(path, read_only=True)
        except (CorruptStateError, StateLockedError) as exc:
            _close_local(table)
            raise click.ClickException(str(exc)) from None
        table.attach(TablePartition(p, store, table.key_serde, table.value_serde))
    table.partition_count = table.partition_count or partitions[-1] + 1
    return table


def _close_local(table: Table) -> None:
    for p in table.held_partitions:
        state = table.detach(p)
        if state is not None:
            state.store.close()


def _local_listing(app: App, table: Table, state_dir: str) -> dict[str, Any]:
    held = []
    if table.store_kind == "rocksdb":
        for p in _partition_dirs(table, state_dir):
            try:
                store = RocksStore(os.path.join(state_dir, table.name, str(p)), read_only=True)
            except (CorruptStateError, StateLockedError):
                held.append({"partition": p, "keys": None})
                continue
            try:
                held.append({"partition": p, "keys": store.estimated_keys()})
            finally:
                store.close()
    return {"name": table.name, "changelog": table.changelog_topic.name, "held": held}
