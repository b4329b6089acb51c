"""``streamkit backfill``: recompute an app's declared tables from the log's history on Spark."""

from __future__ import annotations

from datetime import datetime

import click

from streamkit.cli.apps import app_option, load_app


def _time_ms(value: str | None, option: str) -> int | None:
    """Integer milliseconds, or an ISO date/time (UTC unless it says otherwise)."""
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither milliseconds nor an ISO date/time", param_hint=option) from None
    if parsed.tzinfo is None:
        from datetime import UTC

        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


@click.command("backfill")
@app_option
@click.option("--table", "tables", multiple=True, required=True, metavar="NAME",
              help="A declared table to recompute (repeat for several; all readers of a source together).")
@click.option("--from", "from_", default=None, metavar="TS", help="Only records from this time (ms or ISO).")
@click.option("--to", default=None, metavar="TS", help="Only records up to this time (ms or ISO).")
@click.option("--master", default="local[*]", show_default=True, help="The Spark master URL.")
def backfill(app_ref: str, tables: tuple[str, ...], from_: str | None, to: str | None, master: str) -> None:
    """Recompute declared tables (app.stream(...)...count(NAME)) over the log's history on
    Spark, write them to their changelogs, and move the app's group past what was read, so a
    worker started afterwards serves the results and processes only newer records. Stop the
    app's workers first."""
    from_ms, to_ms = _time_ms(from_, "--from"), _time_ms(to, "--to")
    app = load_app(app_ref)  # a bad -A is one line before Spark starts
    from streamkit.spark.backfill import backfill as run
    from streamkit.spark.backfill import find_pipeline, spark_session

    for name in tables:
        find_pipeline(app, name)  # refused by name before Spark starts
    spark = spark_session(master, f"streamkit-backfill-{app.id}")
    try:
        for report in run(spark, app_ref, *tables, from_ms=from_ms, to_ms=to_ms):
            ends = ", ".join(f"{p}:{o}" for p, o in sorted(report.ends.items()))
            click.echo(f"{report.table}: {report.records_read} records read, {report.keys_written} keys written "
                       f"to its changelog; the group resumes at {ends}")
    finally:
        spark.stop()
