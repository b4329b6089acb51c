"""The orders example: orders joined with payments within 10 minutes, inner and left."""

from __future__ import annotations

from apps import orders
from streamkit.testing import AppDriver

T0 = 1_700_000_000_000
MIN = 60_000


async def test_orders_meet_their_payments_within_ten_minutes() -> None:
    Order, Payment = orders.Order, orders.Payment
    timeline = [  # (minute, topic, record), sent in time order as they would happen
        (0, orders.orders, Order("o1", "ann", 30.0)),
        (1, orders.orders, Order("o2", "bob", 12.5)),
        (3, orders.payments, Payment("o1", 30.0, "card")),
        (4, orders.orders, Order("o3", "cid", 99.0)),
        (9, orders.payments, Payment("o2", 10.0, "cash")),        # short, but within 10 min
        (16, orders.payments, Payment("o3", 99.0, "card")),       # 12 minutes after its order
        (40, orders.orders, Order("o4", "dan", 1.0)),             # moves stream time on
    ]
    async with AppDriver(orders.app) as driver:
        for minute, topic, record in timeline:
            await driver.send(topic, record, key=record.order_id, timestamp=T0 + minute * MIN)
            await driver.process()
        # A payment for o1 two minutes after it, arriving last: late, but as in Kafka Streams
        # no record is dropped for that; the join still keeps order o1 (o1's partition has seen
        # orders up to minute 4, and keeps them 10 + 10 + 1 minutes), so they pair.
        await driver.send(orders.payments, Payment("o1", 5.0, "card"), key="o1", timestamp=T0 + 2 * MIN)
        await driver.process()
        paid = [(e.value["order_id"], e.value["method"], e.timestamp - T0) for e in await driver.read(orders.paid)]
        checked = [(e.value["order_id"], e.value["status"], e.timestamp - T0) for e in await driver.read(orders.checked)]
        late = await driver.read(orders.app.topics["orders-late"])
    # Inner: a pair as soon as both are there, stamped with the later of the two times.
    assert sorted(paid) == [("o1", "card", 2 * MIN), ("o1", "card", 3 * MIN), ("o2", "cash", 9 * MIN)]
    # Left: the pairs, and the orders that met nothing once their window + grace had passed
    # (o3, when the payment at minute 16 moved its partition's stream time past 4 + 10 + 1).
    # o4's window is open.
    assert sorted(checked) == [
        ("o1", "paid", 3 * MIN), ("o1", "short", 2 * MIN), ("o2", "short", 9 * MIN), ("o3", "unpaid", 4 * MIN),
    ]
    assert late == []
