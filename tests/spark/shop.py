"""A small app the Spark tests decode values with (``valueApp`` / ``valueType``)."""

from __future__ import annotations

import streamkit as sk


class Order(sk.Record):
    order_id: str
    user: str
    amount: float
    tags: list[str] = []


app = sk.App("spark-shop")
orders = app.topic("orders", key_type=str, value_type=Order, partitions=1)
