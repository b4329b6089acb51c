"""Hand-written Spark jobs the backfill tests run with ``--job`` (``fn(spark, source_df)``)."""

from __future__ import annotations

from typing import Any


def orders_per_user(spark: Any, source: Any) -> Any:
    """``job_app``'s ``orders_per_user`` in Spark SQL: keys and counts as the table's JSON
    serializer writes them."""
    from pyspark.sql import functions as F

    users = source.select(F.get_json_object(F.col("value").cast("string"), "$.user").alias("user"))
    counts = users.groupBy("user").count()
    key = F.concat(F.lit('"'), "user", F.lit('"'))
    return counts.select(key.alias("key"), F.col("count").cast("string").alias("value"))


def amounts(spark: Any, source: Any) -> Any:
    """Each order's amount keyed by its order id, as strings."""
    from pyspark.sql import functions as F

    value = F.col("value").cast("string")
    return source.select(F.col("key").alias("key"), F.get_json_object(value, "$.amount").alias("value"))


def wrong_columns(spark: Any, source: Any) -> Any:
    return source.select("key", "value", "offset")


not_a_function = 3


def bad_keys(spark: Any, source: Any) -> Any:
    """Keys the table's JSON key serializer cannot read."""
    from pyspark.sql import functions as F

    return source.select(F.lit("not json {").alias("key"), F.lit("1").alias("value")).limit(1)


def failing(spark: Any, source: Any) -> Any:
    """A job whose own code fails on the executors."""
    from pyspark.sql import functions as F

    amount = F.udf(lambda value: _price(value), "string")
    return source.select(F.col("key"), amount("value").alias("value"))


def _price(value: bytes) -> str:
    raise ValueError(f"cannot price order {bytes(value[:5])!r}")
