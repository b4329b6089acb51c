"""``streamkit backfill``: recompute an app's declared tables from the log's history on Spark."""

from __future__ import annotations

import os
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from streamkit.cli.apps import app_option, client_options, load_app
from streamkit.cli.common import command_config_option

SPARK_EXTRA = ("pyspark", "pyarrow", "numpy")  # pyproject.toml's `spark` extra


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
@click.option("--table", "tables", multiple=True, metavar="NAME",
              help="A declared table to recompute (repeat for several; all readers of a source together).")
@click.option("--job", default=None, metavar="MODULE:FUNCTION",
              help="Run fn(spark, source_df) -> DataFrame(key, value) instead of the table's declared pipeline.")
@click.option("--to-topic", default=None, metavar="TOPIC",
              help="Write the results to this topic instead of the table's changelog (the group is not moved).")
@click.option("--source", default=None, metavar="TOPIC",
              help="The topic a --job reads (default: the source of the --table's pipeline).")
@click.option("--from", "from_", default=None, metavar="TS", help="Only records from this time (ms or ISO).")
@click.option("--to", default=None, metavar="TS", help="Only records up to this time (ms or ISO).")
@click.option("--master", default="local[*]", show_default=True, help="The Spark master URL.")
@command_config_option
def backfill(
    app_ref: str, tables: tuple[str, ...], job: str | None, to_topic: str | None, source: str | None,
    from_: str | None, to: str | None, master: str, command_config: Path | None = None,
) -> None:
    """Recompute declared tables (app.stream(...)...count(NAME), windowed ones included) over
    the log's history on Spark, write them to their changelogs, and move the app's group past
    what was read, so a worker started afterwards serves the results and processes only newer
    records. Stop the app's workers first. --job runs a hand-written Spark job instead;
    --to-topic writes the results to a topic and leaves the tables and the group alone.
    Spark's own log goes to a file in the temporary directory
    (streamkit-backfill-APP-PID.log), kept when the backfill fails.
    A kafka:// app's log is reached with the app's TLS and SASL (its broker_credentials, the
    STREAMKIT_* variables, --command-config over both), on the driver and on the executors."""
    from_ms, to_ms = _time_ms(from_, "--from"), _time_ms(to, "--to")
    app = load_app(app_ref)  # a bad -A is one line before Spark starts
    if command_config is not None and not app.broker.startswith("kafka://"):
        raise click.UsageError(f"--command-config is for an app on kafka://; {app_ref}'s broker is {app.broker}")
    options = client_options(app, command_config)  # a bad setting is one line before Spark starts
    try:
        from streamkit.spark.access import log_access
        from streamkit.spark.backfill import backfill as run
        from streamkit.spark.backfill import spark_session
        from streamkit.spark.jobs import load_job, run_job
        from streamkit.spark.planning import find_pipeline
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in SPARK_EXTRA:
            raise
        raise click.ClickException(
            f"streamkit backfill needs the spark extra ({exc.name} is not installed): pip install 'streamkit[spark]'"
        ) from None

    if job is not None:
        if len(tables) > 1:
            raise click.UsageError("--job fills one --table (or writes one --to-topic)")
        if not tables and to_topic is None:
            raise click.UsageError("--job needs --table NAME or --to-topic TOPIC")
        if not tables and source is None:
            raise click.UsageError("--job --to-topic needs the topic it reads: --source TOPIC (or a --table's)")
        load_job(job)  # a missing module or function is one line before Spark starts
    elif not tables:
        raise click.UsageError("name a table: --table NAME (or run a --job)")
    elif source is not None:
        raise click.UsageError("--source is for --job; a table's pipeline names its own source")
    for name in tables:
        find_pipeline(app, name)  # refused by name before Spark starts
    # A refused login or an untrusted certificate is one line before Spark starts, too.
    log_access(app, app_ref, None, options).check()
    import tempfile

    log_path = os.path.join(tempfile.gettempdir(), f"streamkit-backfill-{app.id}-{os.getpid()}.log")
    spark = spark_session(master, f"streamkit-backfill-{app.id}", log_path)
    _warnings_to(log_path)  # PySpark's warnings (and a job's) go beside Spark's own log
    try:
        if job is not None:
            reports = [run_job(spark, app_ref, job, table=tables[0] if tables else None, source_topic=source,
                               to_topic=to_topic, from_ms=from_ms, to_ms=to_ms, options=options)]
        else:
            reports = run(spark, app_ref, *tables, from_ms=from_ms, to_ms=to_ms, to_topic=to_topic, options=options)
        for report in reports:
            click.echo(_describe(report))
    except Exception as exc:
        if type(exc).__name__ not in _SPARK_FAILURES:
            raise
        message, code = _spark_failure(exc)
        click.echo(f"streamkit: error: {message} (Spark's log: {log_path})", err=True)
        sys.exit(code)
    finally:
        spark.stop()
    os.unlink(log_path)  # kept when the backfill failed, for its details


def _warnings_to(log_path: str) -> None:
    import warnings

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        with open(log_path, "a") as log:
            log.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show


# What PySpark raises when a task failed (the Python error comes inside, as text).
_SPARK_FAILURES = ("PythonException", "Py4JJavaError", "SparkRuntimeException", "SparkException")
_ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$")


def _spark_failure(exc: BaseException) -> tuple[str, int]:
    """One line for a failed Spark job: the last Python error it carries, and the exit code
    (2 when it is streamkit's refusal of bad input, else 1)."""
    found = None
    for line in str(exc).splitlines():
        match = _ERROR_LINE.match(line.strip())
        if match:
            found = match
    if found is None:
        return f"the Spark job failed: {type(exc).__name__}", 1
    name, text = found.groups()
    return f"{text}" if name == "ConfigError" else f"the Spark job failed: {name}: {text}", (
        2 if name == "ConfigError" else 1
    )


def _describe(report: Any) -> str:
    line = f"{report.table}: {report.records_read} {'offsets' if report.job else 'records'} read, "
    if report.to_topic is not None:
        return line + f"{report.keys_written} records written to topic {report.to_topic}"
    if report.windows is not None:
        line += f"{report.windows} windows ({report.keys_written} store records) written to its changelog"
    else:
        line += f"{report.keys_written} keys written to its changelog"
    if report.deleted:
        line += f" ({report.deleted} stale keys deleted)"
    if report.late:
        line += f", {report.late} late records sent to the late topic"
    for topic, written in report.streams.items():
        line += f", {written} records written to topic {topic}"
    ends = ", ".join(f"{p}:{o}" for p, o in sorted(report.ends.items()))
    return line + f"; the group resumes at {ends}"
