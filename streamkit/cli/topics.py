"""``streamkit topics``: create, list, describe, alter and delete topics, delete records."""

from __future__ import annotations

import click

from streamkit.cli.access import LogTarget, TopicState, open_access
from streamkit.cli.common import count, human_bytes, log_target_options, parse_pairs, warn
from streamkit.log.config import TopicConfig
from streamkit.log.manager import validate_topic_name


@click.group()
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


@topics.command("create")
@click.argument("name")
@click.option("--partitions", "-p", type=click.IntRange(min=1), help="Number of partitions [default: 1].")
@click.option(
    "--config",
    "-c",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Kafka topic config, e.g. retention.ms=3600000 or cleanup.policy=compact (repeatable).",
)
@click.option("--if-not-exists", is_flag=True, help="Succeed quietly when the topic exists.")
@log_target_options
def create(
    name: str, partitions: int | None, configs: tuple[str, ...], if_not_exists: bool, target: LogTarget
) -> None:
    """Create topic NAME (creates the data directory when it is missing)."""
    config = dict(parse_pairs(configs, "--config"))
    if target.bootstrap is None:
        # Before the data directory is made or opened: bad input leaves nothing behind.
        validate_topic_name(name)
        TopicConfig.from_kafka(config)
    with open_access(target, create=True, warn=warn) as access:
        if if_not_exists and name in access.list_topics():
            return
        state = access.create_topic(name, partitions, config)
    n = len(state.partitions)
    click.echo(f"created topic {name} with {count(n, 'partition')}")


@topics.command("list")
@click.option("--internal", is_flag=True, help="Include internal topics (__consumer_offsets).")
@log_target_options
def list_(internal: bool, target: LogTarget) -> None:
    """Print the name of every topic, one per line."""
    with open_access(target, warn=warn) as access:
        names = access.list_topics(include_internal=internal)
    for name in names:
        click.echo(name)


@topics.command("describe")
@click.argument("name")
@log_target_options
def describe(name: str, target: LogTarget) -> None:
    """Show topic NAME: each partition's offsets, size and segments, and its config."""
    with open_access(target, warn=warn) as access:
        state = access.describe_topic(name)
    click.echo(format_topic(state))


def format_topic(state: TopicState) -> str:
    """The ``describe`` text; a size or segment count the log did not report shows as "-"."""
    records = sum(p.high_watermark - p.log_start_offset for p in state.partitions)
    sizes = [p.size_bytes for p in state.partitions]
    size = "-" if None in sizes else human_bytes(sum(s or 0 for s in sizes))
    lines = [
        f"Topic: {state.name}  Partitions: {len(state.partitions)}  "
        f"Internal: {'yes' if state.internal else 'no'}  "
        f"Offsets in the log: {records}  Size: {size}",
        "",
    ]
    rows = [("Partition", "LogStartOffset", "HighWatermark", "Size", "Segments")]
    rows += [
        (str(p.partition), str(p.log_start_offset), str(p.high_watermark), _known(p.size_bytes), _known(p.segments))
        for p in state.partitions
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines += ["", "Config:"]
    lines += [f"  {key} = {value}" for key, value in sorted(state.config.items())]
    return "\n".join(lines)


def _known(value: int | None) -> str:
    return "-" if value is None else str(value)


@topics.command("alter")
@click.argument("name")
@click.option(
    "--partitions", "-p", type=click.IntRange(min=1), required=True,
    help="The new number of partitions (a topic never shrinks).",
)
@log_target_options
def alter(name: str, partitions: int, target: LogTarget) -> None:
    """Grow topic NAME to --partitions partitions.

    Records keep their partitions: keys sent from now on may hash to another one (as in Kafka).
    """
    with open_access(target, warn=warn) as access:
        state = access.add_partitions(name, partitions)
    click.echo(f"topic {name} now has {count(len(state.partitions), 'partition')}")


@topics.command("delete")
@click.argument("name")
@log_target_options
def delete(name: str, target: LogTarget) -> None:
    """Delete topic NAME with all its records and its groups' committed offsets."""
    with open_access(target, warn=warn) as access:
        access.delete_topic(name)
    click.echo(f"deleted topic {name}")


@topics.command("delete-records")
@click.argument("name")
@click.option("--partition", "-p", type=click.IntRange(min=0), required=True, help="The partition.")
@click.option(
    "--offset", "-o", type=click.IntRange(min=-1), required=True,
    help="Delete the records below this offset; -1: all of them (up to the high watermark).",
)
@log_target_options
def delete_records(name: str, partition: int, offset: int, target: LogTarget) -> None:
    """Delete the records of NAME's --partition below --offset (Kafka's kafka-delete-records).

    The partition's log start offset moves up to --offset and never back: reading below it
    fails, consumers starting from the beginning start there.
    """
    with open_access(target, warn=warn) as access:
        low_watermark = access.delete_records(name, partition, offset)
    click.echo(f"{name}-{partition}: log start offset {low_watermark}")
