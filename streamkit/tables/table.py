"""``Table``: keyed state declared by an app, used like a dict inside agents (Faust's spelling).

    >>> import streamkit as sk
    >>> app = sk.App("docs-tables")
    >>> counts = app.Table("counts", default=int)
    >>> counts.changelog_topic.name, counts.changelog_topic.config["cleanup.policy"]
    ('docs-tables-counts-changelog', 'compact')

A ``Table`` is a declaration: it holds no data until a worker runs the app. The worker's
state manager then installs one ``TablePartition`` per partition it holds (``attach``), and the
dict operations go to the partition of the event being processed: a key stays in the
partition of the event that wrote it, as in Faust and Kafka Streams, whatever the key's hash
says (a warning is logged once per table when the two disagree: usually a missing
``group_by``). Outside an agent (a timer, a query) a key is looked up in the partition its hash
names, then in the other partitions held here.

Every change is written to the compacted changelog topic ``<app>-<table>-changelog`` and, once
acknowledged, to the store; the worker commits source offsets only after that.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from streamkit._core.clock import SYSTEM_CLOCK, Clock
from streamkit._core.context import current_event
from streamkit._core.errors import ConfigError
from streamkit._core.partitioner import partition_for_key
from streamkit._core.serde import Serde, serde_for, state_serde
from streamkit.tables.errors import PartitionNotHeldError, TableError
from streamkit.tables.partition import MISSING, TablePartition

if TYPE_CHECKING:
    from streamkit._core.context import EventContext

logger = logging.getLogger(__name__)

STORES = {"rocksdb": "rocksdb", "rocksdb://": "rocksdb", "memory": "memory", "memory://": "memory"}


def table_serdes(
    key_type: Any, value_type: Any, key_serializer: str | Serde | None, value_serializer: str | Serde | None
) -> tuple[Serde, Serde]:
    """A table's key and value serializers. Keys: a declared type's codec (str keys as UTF-8,
    as a str-keyed topic writes them, so hashes agree), else JSON (any JSON-able key). Values:
    JSON, typed if declared; untyped, a record stored in it reads back as that record. An
    explicit serializer wins."""
    key = serde_for(key_serializer if key_serializer is not None else (key_type or "json"), key_type)
    value = serde_for(value_serializer if value_serializer is not None else (value_type or "json"), value_type)
    return key, state_serde(value)


class Table:
    """A table of an app; see the module docstring. Declare it with ``app.Table(...)``."""

    is_windowed = False  # a windowed table's partitions hold a window driver's sorted store

    def __init__(
        self,
        app: Any,
        name: str,
        *,
        default: Callable[[], Any] | None = None,
        key_type: Any = None,
        value_type: Any = None,
        key_serializer: str | Serde | None = None,
        value_serializer: str | Serde | None = None,
        partitions: int | None = None,
        store: str | None = None,
        standby_replicas: int | None = None,
        help: str = "",
        is_global: bool = False,
        cache: bool = True,
    ) -> None:
        if default is not None and not callable(default):
            raise ConfigError(f"table {name!r}: default must be callable (like int or list), not {default!r}")
        if partitions is not None and partitions < 1:
            raise ConfigError(f"table {name!r} needs at least one partition")
        if store is None:
            # The app's ``store`` setting (Faust's), when one was given; else RocksDB.
            conf = getattr(app, "conf", None)
            given = conf is not None and "store" in getattr(conf, "_given", ())
            store = str(getattr(conf, "store", "")).split("://", 1)[0] if given else "rocksdb"
        kind = STORES.get(store)
        if kind is None:
            raise ConfigError(f"table {name!r}: store must be 'rocksdb' or 'memory', not {store!r}")
        if standby_replicas is None:
            # The app's ``table_standby_replicas`` setting (Faust's); 0 without an app's settings.
            standby_replicas = int(getattr(getattr(app, "conf", None), "table_standby_replicas", 0))
        if standby_replicas < 0:
            raise ConfigError(f"table {name!r}: standby_replicas must be >= 0")
        self.app = app
        self.name = name
        self.default = default
        self.key_type = key_type
        self.value_type = value_type
        self.store_kind = kind
        self.standby_replicas = standby_replicas
        # A global table: every worker holds every partition, kept current from the
        # changelog, for lookups by any key (``app.GlobalTable``).
        self.is_global = is_global
        # The record cache (Kafka Streams' statestore.cache.max.bytes): on, each commit writes
        # the latest value of each key changed since the last one to the changelog, the
        # table's stream; off (``cache=False``), every write, in order (``cache_off``).
        self.cache = cache
        self.help = help
        self.declared_partitions = partitions
        self.key_serde, self.value_serde = table_serdes(key_type, value_type, key_serializer, value_serializer)
        self.changelog_topic = app.topic(
            f"{app.id}-{name}-changelog",
            key_serializer=self.key_serde,
            value_serializer=self.value_serde,
            partitions=partitions,
            compacted=True,
            internal=True,
        )
        # Runtime: set by the worker's state manager.
        self.partition_count: int | None = partitions
        self._partitions: dict[int, TablePartition] = {}
        self._warned_placement = False
        self.clock: Clock = SYSTEM_CLOCK  # timestamps of writes made outside an agent

    def __repr__(self) -> str:
        return f"<Table {self.name!r}>"

    # -- runtime binding ----------------------------------------------------------------------

    def attach(self, partition: TablePartition) -> None:
        if not self.cache:
            partition.cache_off()
        self._partitions[partition.partition] = partition

    def detach(self, partition: int) -> TablePartition | None:
        return self._partitions.pop(partition, None)

    @property
    def held_partitions(self) -> list[int]:
        return sorted(self._partitions)

    def partition_state(self, partition: int) -> TablePartition | None:
        return self._partitions.get(partition)

    # -- placement ----------------------------------------------------------------------------

    def partition_of(self, key: Any) -> int:
        """The partition ``key``'s hash names (murmur2 of its bytes, as producers place keys)."""
        count = self.partition_count
        if count is None:
            raise TableError(f"table {self.name!r} is not running in a worker")
        raw = self.key_serde.dumps(key)
        if raw is None:
            raise TableError(f"table {self.name!r}: a key cannot be None")
        return partition_for_key(raw, count)

    def _write_target(self, key: Any) -> tuple[TablePartition, int]:
        event: EventContext | None = current_event.get()
        if event is None:
            return self._held(self.partition_of(key)), self._now()
        state = self._partitions.get(event.partition)
        if state is None:
            raise PartitionNotHeldError(
                f"table {self.name!r} has no partition {event.partition} here (the event's, "
                f"from {event.topic}); it has {self.partition_count} partitions"
            )
        if not self._warned_placement and key != event.key:
            self._check_placement(key, event)
        return state, event.timestamp

    def _check_placement(self, key: Any, event: EventContext) -> None:
        expected = self.partition_of(key)
        if expected != event.partition:
            self._warned_placement = True
            logger.warning(
                "table %s: key %r is written in partition %d (the event's, from %s) but its hash "
                "names partition %d; it stays where the event is (as in Faust and Kafka Streams). "
                "Re-key the stream with group_by so each key has one home.",
                self.name, key, event.partition, event.topic, expected,
            )

    def _now(self) -> int:
        return self.clock.now_ms()

    def _held(self, partition: int) -> TablePartition:
        state = self._partitions.get(partition)
        if state is None:
            raise PartitionNotHeldError(
                f"table {self.name!r}: partition {partition} is not held by this worker"
            )
        return state

    def _read_target(self, key: Any) -> tuple[TablePartition | None, Any]:
        """Where ``key`` is and its value (``MISSING`` when no held partition has it)."""
        event: EventContext | None = current_event.get()
        if event is not None and not self.is_global:
            state = self._partitions.get(event.partition)
            if state is None:
                raise PartitionNotHeldError(f"table {self.name!r} has no partition {event.partition} here")
            return state, state.get(key)
        home = self._partitions.get(self.partition_of(key)) if self.partition_count else None
        if home is not None:
            value = home.get(key)
            if value is not MISSING:
                return home, value
        for state in self._partitions.values():
            if state is not home:
                value = state.get(key)
                if value is not MISSING:
                    return state, value
        return home, MISSING

    # -- the dict interface -------------------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        _state, value = self._read_target(key)
        if value is MISSING:
            if self.default is None:
                raise KeyError(key)
            return self.default()
        return value

    def __setitem__(self, key: Any, value: Any) -> None:
        if value is None:
            raise TableError(f"table {self.name!r}: None is a tombstone; use del table[key]")
        self._check(key, value)
        state, timestamp = self._write_target(key)
        state.set(key, value, timestamp)

    def _check(self, key: Any, value: Any) -> None:
        """A key or value of another type than declared is refused at once (inside an agent
        the record then goes to the dead-letter topic), not when the commit encodes it."""
        for what, expected, got in (("key", self.key_type, key), ("value", self.value_type, value)):
            if isinstance(expected, type) and not isinstance(got, expected):
                if expected is float and isinstance(got, int) and not isinstance(got, bool):
                    continue
                raise TableError(
                    f"table {self.name!r}: {what} {got!r} is a {type(got).__name__}, "
                    f"but the table's {what}s are {expected.__name__}"
                )

    def __delitem__(self, key: Any) -> None:
        state, timestamp = self._write_target(key)
        if state.get(key) is MISSING:
            raise KeyError(key)
        state.delete(key, timestamp)

    def set_at(self, key: Any, value: Any, timestamp_ms: int) -> None:
        """``table[key] = value`` with the changelog record stamped ``timestamp_ms`` instead of
        the event's time (an aggregation stamps the largest timestamp behind its result)."""
        if value is None:
            raise TableError(f"table {self.name!r}: None is a tombstone; use del table[key]")
        self._check(key, value)
        state, _now = self._write_target(key)
        state.set(key, value, timestamp_ms)

    def timestamp_of(self, key: Any) -> int | None:
        """The timestamp ``key``'s value was written with, when this worker still knows it
        (``TablePartition.timestamp_of``); ``None`` when it does not, or the key is absent."""
        try:
            state, value = self._read_target(key)
        except PartitionNotHeldError:
            return None
        return None if state is None or value is MISSING else state.timestamp_of(key)

    def tombstone(self, key: Any, timestamp_ms: int | None = None) -> None:
        """Delete ``key`` whether or not the table holds it. With the cache off its tombstone
        always reaches the changelog, as Kafka Streams forwards such a deletion (``toTable``,
        table-table joins); with the cache on, a key absent at the last commit and now sends
        nothing (Kafka Streams' cache flush skips null to null).

        >>> import streamkit as sk
        >>> from streamkit.tables.partition import TablePartition
        >>> from streamkit.tables.store import MemoryStore
        >>> app = sk.App("docs-tombstone")
        >>> for name, cache in [("off", False), ("on", True)]:
        ...     t = app.Table(name, cache=cache)
        ...     t.attach(TablePartition(0, MemoryStore(), t.key_serde, t.value_serde)); t.partition_count = 1
        ...     t.tombstone("never-held")
        ...     print(name, [change[:2] for change in t.partition_state(0).take_changes()])
        off [(b'"never-held"', None)]
        on []
        """
        state, timestamp = self._write_target(key)
        state.delete(key, timestamp if timestamp_ms is None else timestamp_ms)

    def __contains__(self, key: Any) -> bool:
        try:
            _state, value = self._read_target(key)
        except PartitionNotHeldError:
            return False
        return value is not MISSING

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            _state, value = self._read_target(key)
        except PartitionNotHeldError:
            return default
        return default if value is MISSING else value

    def pop(self, key: Any, *default: Any) -> Any:
        state, timestamp = self._write_target(key)
        value = state.get(key)
        if value is MISSING:
            if default:
                return default[0]
            raise KeyError(key)
        state.delete(key, timestamp)
        return value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        state, timestamp = self._write_target(key)
        value = state.get(key)
        if value is MISSING:
            self._check(key, default)
            state.set(key, default, timestamp)
            return default
        return value

    def update(self, other: Any = (), **kwargs: Any) -> None:
        pairs = other.items() if hasattr(other, "items") else other
        for key, value in pairs:
            self[key] = value
        for key, value in kwargs.items():
            self[key] = value

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Keys and values of every partition held here (inside an agent: its partition's)."""
        for state in self._scope():
            yield from state.items()

    def keys(self) -> Iterator[Any]:
        for key, _value in self.items():
            yield key

    def values(self) -> Iterator[Any]:
        for _key, value in self.items():
            yield value

    def __iter__(self) -> Iterator[Any]:
        return self.keys()

    def __len__(self) -> int:
        return sum(1 for _ in self.items())

    def _scope(self) -> list[TablePartition]:
        event: EventContext | None = current_event.get()
        if event is not None and not self.is_global:
            state = self._partitions.get(event.partition)
            return [state] if state is not None else []
        return [self._partitions[p] for p in sorted(self._partitions)]

    def windows(self, key: Any, from_ms: int | None = None, to_ms: int | None = None) -> list[dict[str, Any]]:
        """A windowed table's windows of ``key`` (see ``streamkit.windows.wtable``)."""
        raise TableError(f"table {self.name!r} is not windowed")

    def as_ansitable(self, *, title: str | None = None, key: str = "Key", value: str = "Value", sort: bool = False) -> str:
        """The keys and values held here as a text table (Faust's ``as_ansitable``)."""
        return ansitable(self.items(), title=title, key=key, value=value, sort=sort)


def ansitable(
    items: Iterable[tuple[Any, Any]], *, title: str | None = None, key: str = "Key", value: str = "Value", sort: bool = False
) -> str:
    """Keys and values as a text table (what ``as_ansitable`` draws)."""
    rows = [(repr(k), repr(v)) for k, v in items]
    if sort:
        rows.sort()
    header = (key, value)
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(2)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: tuple[str, str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [rule, line(header), rule, *(line(r) for r in rows), rule]
    if title:
        out.insert(0, title)
    return "\n".join(out)


class SetTable(Table):
    """A table of sets (Faust's ``SetTable``): ``table[k].add(v)``, ``.discard(v)``, ``|=`` ...
    change the set in place and are written like any other change.

    >>> import streamkit as sk
    >>> app = sk.App("docs-sets")
    >>> tags = app.SetTable("tags")
    >>> tags.default is set
    True
    """

    def __init__(self, app: Any, name: str, **options: Any) -> None:
        options.setdefault("default", set)
        options.setdefault("value_type", set)  # JSON arrays on the wire, sets here
        super().__init__(app, name, **options)

    def __getitem__(self, key: Any) -> Any:
        state, found = self._read_target(key)
        if state is None:
            raise PartitionNotHeldError(f"table {self.name!r}: the partition of {key!r} is not held here")
        if isinstance(found, TrackedSet):
            return found
        tracked = TrackedSet(() if found is MISSING else found)
        tracked.bind(self, key)
        return tracked

    def __setitem__(self, key: Any, value: Any) -> None:
        tracked = value if isinstance(value, TrackedSet) else TrackedSet(value)
        tracked.bind(self, key)
        state, timestamp = self._write_target(key)
        state.set(key, tracked, timestamp)


class TrackedSet(set[Any]):
    """A set that writes itself back to its table when changed in place."""

    _table: SetTable | None = None
    _key: Any = None

    def __repr__(self) -> str:
        return repr(set(self)) if self else "set()"

    def bind(self, table: SetTable, key: Any) -> None:
        self._table = table
        self._key = key

    def _changed(self) -> None:
        if self._table is not None:
            state, timestamp = self._table._write_target(self._key)
            state.set(self._key, self, timestamp)

    def add(self, element: Any) -> None:
        super().add(element)
        self._changed()

    def discard(self, element: Any) -> None:
        super().discard(element)
        self._changed()

    def remove(self, element: Any) -> None:
        super().remove(element)
        self._changed()

    def pop(self) -> Any:
        element = super().pop()
        self._changed()
        return element

    def clear(self) -> None:
        super().clear()
        self._changed()

    def update(self, *others: Any) -> None:
        super().update(*others)
        self._changed()

    def difference_update(self, *others: Any) -> None:
        super().difference_update(*others)
        self._changed()

    def intersection_update(self, *others: Any) -> None:
        super().intersection_update(*others)
        self._changed()

    def symmetric_difference_update(self, other: Any) -> None:
        super().symmetric_difference_update(other)
        self._changed()

    def __ior__(self, other: Any) -> TrackedSet:  # type: ignore[misc]
        self.update(other)
        return self

    def __isub__(self, other: Any) -> TrackedSet:  # type: ignore[misc]
        self.difference_update(other)
        return self

    def __iand__(self, other: Any) -> TrackedSet:  # type: ignore[misc]
        self.intersection_update(other)
        return self

    def __ixor__(self, other: Any) -> TrackedSet:  # type: ignore[misc]
        self.symmetric_difference_update(other)
        return self
