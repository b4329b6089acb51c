"""``streamkit users add|list|delete``: the SASL users of a ``streamkit broker`` data directory.

The users live in the data directory's credential file (``log/server/credentials.py``): SCRAM
credentials (salt, StoredKey, ServerKey, iterations), never the password; PLAIN logins are
checked against them. The password comes from a prompt (asked twice, not echoed) or from the
first line of ``--password-file`` (``-`` for stdin), never from an argument, so it is not in
the shell history or the process list. While a broker holds the directory the file is its,
and these commands refuse with one line: change users on a running broker with Kafka's
``kafka-configs --alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users``.
Errors are one line with exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from streamkit.cli.common import InputError
from streamkit.log.manager import directory_owner
from streamkit.log.server.credentials import CredentialStore, check_user_name
from streamkit.log.server.errors import CredentialStoreError, ScramError
from streamkit.log.server.scram import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
)

_DATA_DIR = click.option(
    "--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".streamkit"),
    show_default=True, envvar="STREAMKIT_DATA_DIR", help="Data directory of the broker.",
)
_MECHANISMS = click.Choice(sorted(MECHANISMS))


@click.group("users")
def users() -> None:
    """Add, list and delete the SASL users (SCRAM and PLAIN) of a streamkit broker data directory."""


def _store(data_dir: Path) -> CredentialStore:
    owner = directory_owner(data_dir)
    if owner is not None:
        raise InputError(
            f"a running process{f' (pid {owner.pid})' if owner.pid else ''} serves {data_dir}: change its users with "
            "kafka-configs --alter --entity-type users against it, or stop it first"
        )
    try:
        return CredentialStore.for_data_dir(data_dir).load()
    except CredentialStoreError as exc:
        raise InputError(str(exc)) from exc


def _read_password(password_file: Path | None) -> str:
    if password_file is None:
        password: str = click.prompt("Password", hide_input=True, confirmation_prompt=True, err=True)
        return password
    try:
        text = sys.stdin.read() if str(password_file) == "-" else password_file.read_text()
    except OSError as exc:
        raise InputError(f"cannot read the password file {password_file}: {exc.strerror}") from exc
    lines = text.splitlines()
    if not lines or not lines[0]:
        raise InputError(f"the password file {password_file} is empty")
    return lines[0]


@users.command("add")
@click.argument("name")
@_DATA_DIR
@click.option("--mechanism", "mechanisms", type=_MECHANISMS, multiple=True,
              help="SCRAM mechanism to store (repeatable; default both).")
@click.option("--iterations", type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS), default=DEFAULT_ITERATIONS,
              show_default=True, help="PBKDF2 iterations of the stored credential.")
@click.option("--password-file", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path), default=None,
              help="Read the password from the first line of this file ('-': stdin) instead of a prompt.")
def add(name: str, data_dir: Path, mechanisms: tuple[str, ...], iterations: int, password_file: Path | None) -> None:
    """Add user NAME, or set a new password for it."""
    try:
        check_user_name(name)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    store = _store(data_dir)
    password = _read_password(password_file)
    chosen = tuple(MECHANISMS[m] for m in (mechanisms or sorted(MECHANISMS)))
    try:
        store.set_password(name, password, iterations, chosen)
        store.save()
    except (ScramError, CredentialStoreError) as exc:
        raise InputError(str(exc)) from exc
    click.echo(f"user {name}: {', '.join(m.name for m in chosen)} ({iterations} iterations)")


@users.command("list")
@_DATA_DIR
def list_users(data_dir: Path) -> None:
    """List the users with their mechanisms and iterations (never a secret)."""
    for name, creds in _store(data_dir).users().items():
        described = ", ".join(f"{mech} iterations={cred.iterations}" for mech, cred in sorted(creds.items()))
        click.echo(f"{name}\t{described}")


@users.command("delete")
@click.argument("name")
@_DATA_DIR
@click.option("--mechanism", type=_MECHANISMS, default=None, help="Delete only this mechanism's credential.")
def delete(name: str, data_dir: Path, mechanism: str | None) -> None:
    """Delete user NAME (or one of its mechanisms)."""
    store = _store(data_dir)
    if not store.delete(name, MECHANISMS[mechanism] if mechanism else None):
        raise InputError(f"no user {name}" + (f" with {mechanism}" if mechanism else ""))
    try:
        store.save()
    except CredentialStoreError as exc:
        raise InputError(str(exc)) from exc
    click.echo(f"deleted {name}" + (f" ({mechanism})" if mechanism else ""))
