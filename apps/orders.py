"""Orders joined with their payments within 10 minutes (windowed stream-stream joins).

    orders   (keyed by order id) --join within 10 min (inner)--> orders-paid
    payments (keyed by order id) --join within 10 min (left)---> orders-checked

``orders-paid`` gets one record per order and payment whose timestamps are at most 10 minutes
apart, as soon as the second of the two arrives. ``orders-checked`` gets the same pairs, and
for an order that met no payment within 10 minutes, one record with ``"status": "unpaid"``:
written once stream time (the newest timestamp the join has seen) passes the order's time
+ 10 minutes + 1 minute of grace, never before (a payment may still come until then). As in
Kafka Streams, a late record is not dropped: it pairs with what the join still keeps (each side
10 + 10 + 1 minutes behind its newest record); a payment that meets nothing the join keeps, and
that the join no longer keeps itself, goes to ``orders-late``.

Run it:

    streamkit worker -A apps.orders:app
    streamkit send -A apps.orders:app orders '{"order_id": "o1", "user": "ann", "amount": 30.0}' --key o1
    streamkit send -A apps.orders:app payments '{"order_id": "o1", "amount": 30.0, "method": "card"}' --key o1
    streamkit consume orders-paid --from-beginning --print-keys
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import streamkit as sk

app = sk.App("orders", broker=os.environ.get("STREAMKIT_BROKER", "file://.streamkit"))


class Order(sk.Record):
    order_id: str
    user: str
    amount: float


class Payment(sk.Record):
    order_id: str
    amount: float
    method: str


orders = app.topic("orders", key_type=str, value_type=Order, partitions=4)
payments = app.topic("payments", key_type=str, value_type=Payment, partitions=4)
paid = app.topic("orders-paid", key_type=str, value_type=dict, partitions=4)
checked = app.topic("orders-checked", key_type=str, value_type=dict, partitions=4)

WITHIN = timedelta(minutes=10)
GRACE = timedelta(minutes=1)


def paid_order(order: Order, payment: Payment) -> dict[str, Any]:
    return {"order_id": order.order_id, "user": order.user, "amount": order.amount,
            "paid": payment.amount, "method": payment.method}


def checked_order(order: Order, payment: Payment | None) -> dict[str, Any]:
    if payment is None:
        return {"order_id": order.order_id, "user": order.user, "amount": order.amount, "status": "unpaid"}
    status = "paid" if payment.amount >= order.amount else "short"
    return {"order_id": order.order_id, "user": order.user, "amount": order.amount, "status": status}


app.stream(orders).join(app.stream(payments), paid_order, within=WITHIN, grace=GRACE).to(paid)
app.stream(orders).join(app.stream(payments), checked_order, within=WITHIN, grace=GRACE, how="left").to(checked)
