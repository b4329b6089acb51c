"""Spark over the log: a PySpark data source named ``streamkit`` (the ``streamkit[spark]`` extra).

The only package that imports ``pyspark`` and ``pyarrow``; ``import streamkit`` never imports
it. ``register(spark)`` makes the format known to a session::

    from streamkit.spark import register
    register(spark)
    df = spark.read.format("streamkit").option("path", "data").option("topic", "orders").load()

``source`` holds the data source (batch reads, streaming reads, appends), ``options`` the
options and the offset plan, ``logs`` the two ways to a log (segment files or a broker),
``arrow`` the record/Arrow conversion and ``values`` typed value columns. docs/spark.md is
the user's guide.

Owns: the modules named above, and the backfill (declared tables recomputed on Spark):
``backfill`` (the driver), ``planning`` (what it runs), ``executors`` (what Spark's executors
run), ``writes`` (what it writes to the log), ``streams`` (a table's stream and what reads
it), ``jobs`` (hand-written jobs), ``access`` (how the driver and the executors reach the
app's log, its TLS and SASL included).
May import: ``runtime`` and every layer below it; never ``cli``, ``web`` or ``testing``.
"""

from streamkit.spark.source import FORMAT, StreamkitDataSource, register

__all__ = ["FORMAT", "StreamkitDataSource", "register"]
