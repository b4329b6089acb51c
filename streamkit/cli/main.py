"""Entry point of the ``streamkit`` command."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="streamkit")
def cli() -> None:
    """streamkit: Kafka's stream-processing model for Python."""


def main() -> None:
    cli()
