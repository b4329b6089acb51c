"""The state of a windowed stream-stream join: a table declared by the join's plan
(``plan.py``), holding both sides' records per partition in the join driver's store layout
(``streamkit.windows.join``), changelogged and restored as windowed tables are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamkit._core.serde import Serde
from streamkit.dsl.nodes import StreamJoin
from streamkit.tables.errors import TableError
from streamkit.tables.partition import SortedPartition, WindowStoreView
from streamkit.tables.table import Table
from streamkit.windows.join import Codec, WindowJoin
from streamkit.windows.wtable import watch_lateness


class JoinState(Table):
    """The state of one windowed stream-stream join: per partition, both sides' records in the
    join driver's store layout (``streamkit.windows.join``), changelogged and restored as
    windowed tables are. Declared by the join's plan; not queryable."""

    is_windowed = True  # partitions are SortedPartitions holding a driver's sorted store

    def __init__(
        self, app: Any, name: str, *, join: StreamJoin, key_serde: Serde, left_serde: Serde, right_serde: Serde,
        partitions: int | None = None, store: str | None = None,
    ) -> None:
        super().__init__(
            app, name, key_serializer="raw", value_serializer="raw", partitions=partitions, store=store,
            help=f"state of the windowed {join.how} join {join.name!r}",
        )
        self.join = join
        self.join_key_serde = key_serde
        self.left = Codec(_dumps_of(left_serde), left_serde.loads)
        self.right = Codec(_dumps_of(right_serde), right_serde.loads)
        self.late_topic = app.topic(f"{app.id}-late", key_serializer="raw", value_serializer="json", internal=True)
        self.late = watch_lateness(self, join.grace_ms)  # records sent to the late topic by this worker, by reason

    @property
    def late_records(self) -> int:
        return self.late.total

    def driver(self, state: SortedPartition) -> WindowJoin:
        """The join driver over one partition's state."""
        join = self.join
        return WindowJoin(join.within_ms, join.grace_ms, join.how, WindowStoreView(state), left=self.left, right=self.right)

    def windows(self, key: Any, from_ms: int | None = None, to_ms: int | None = None) -> list[dict[str, Any]]:
        raise TableError(f"table {self.name!r} is a join's state: it is not queryable")

    def items(self) -> Any:
        raise TableError(f"table {self.name!r} is a join's state: it is not queryable")

    def __getitem__(self, key: Any) -> Any:
        raise TableError(f"table {self.name!r} is a join's state: it is not queryable")

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TableError(f"table {self.name!r} is written by its join only")

    def __delitem__(self, key: Any) -> None:
        raise TableError(f"table {self.name!r} is written by its join only")


def _dumps_of(serde: Serde) -> Callable[[Any], bytes]:
    dumps = serde.dumps

    def to_bytes(value: Any) -> bytes:
        return dumps(value) or b""

    return to_bytes
