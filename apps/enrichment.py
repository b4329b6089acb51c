"""Enrichment: each order joined with its customer's current profile (a stream-table join).

    customers (keyed by id) --to_table--> table customers
    orders (keyed by customer id) --join(customers)--> enriched-orders

Run it:

    streamkit worker -A apps.enrichment:app
    streamkit send -A apps.enrichment:app customers '{"name": "Ann", "tier": "gold"}' --key c1
    streamkit send -A apps.enrichment:app orders '{"order_id": "o1", "amount": 30.0}' --key c1
    streamkit consume enriched-orders --from-beginning
"""

from __future__ import annotations

import os

import streamkit as sk


class Customer(sk.Record):
    name: str
    tier: str


class Order(sk.Record):
    order_id: str
    amount: float


class EnrichedOrder(sk.Record):
    order_id: str
    amount: float
    customer: str | None
    tier: str | None


app = sk.App("enrichment", broker=os.environ.get("STREAMKIT_BROKER", "file://.streamkit"))
customers = app.topic("customers", key_type=str, value_type=Customer, partitions=4)
orders = app.topic("orders", key_type=str, value_type=Order, partitions=4)
enriched = app.topic("enriched-orders", key_type=str, value_type=EnrichedOrder, partitions=4)

customer_table = app.stream(customers).to_table("customers", key_type=str, value_type=Customer)


def enrich(order: Order, customer: Customer | None) -> EnrichedOrder:
    return EnrichedOrder(
        order_id=order.order_id,
        amount=order.amount,
        customer=customer.name if customer else None,
        tier=customer.tier if customer else None,
    )


# A left join: an order of an unknown customer still goes through, with no profile.
app.stream(orders).join(customer_table, enrich, how="left").to(enriched)
