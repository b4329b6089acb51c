"""``Record``: the base class of typed message values, serialized with msgspec.

    >>> class Order(Record):
    ...     order_id: str
    ...     amount: float
    >>> Order(order_id="o-1", amount=9.5)
    Order(order_id='o-1', amount=9.5)

A field of a record class (``Order.amount``) is a descriptor that reads the field from an
instance; ``Stream.group_by(Order.user)`` uses that to key records by a field.
"""

from __future__ import annotations

import msgspec


class Record(msgspec.Struct):
    """Base class of typed records: declare fields as class annotations."""
