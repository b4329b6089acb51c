"""``WindowedTable``: a table of per-key, per-window aggregates on event time.

It is a table like the others for the state manager (a changelog, RocksDB or memory, recovery
from the changelog tail), whose partitions are ``SortedPartition``s holding the window driver's
store layout (``aggregate.py``): window aggregates, the windows ordered by end, and the
driver's stream time and emit progress, all changelogged, so a restored partition carries on
with the same answers. Declared by the DSL (``app.stream(t).group_by(f).window(spec).count(n)``).

Reads go through ``windows(key)`` and ``items()`` (``((key, (start_ms, end_ms)), value)``),
not ``table[key]``: a key has many windows. (Faust's spelling, ``app.Table(...).tumbling(...)``,
wraps this class: ``streamkit.faust.windows``.)

Late records are counted per table (or join) and reason in a ``LateCounter`` that
``late_counter(app, name)`` hands out, one per name and app, for ``/metrics`` and ``/status``
(``late_counts(app)``); the join driver counts its late records the same way.

>>> import streamkit as sk
>>> from streamkit.windows import Tumbling
>>> app = sk.App("docs-windows")
>>> clicks = app.topic("clicks", key_type=str)
>>> per_minute = app.stream(clicks).group_by_key().window(Tumbling(60)).count("clicks_per_minute")
>>> per_minute.table.changelog_topic.name, per_minute.table.late_topic.name
('docs-windows-clicks_per_minute-changelog', 'docs-windows-late')
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from streamkit._core.errors import ConfigError
from streamkit._core.partitioner import partition_for_key
from streamkit._core.serde import Serde
from streamkit.tables.errors import TableError
from streamkit.tables.partition import SortedPartition, WindowStoreView
from streamkit.tables.table import Table, table_serdes
from streamkit.windows.aggregate import (
    Aggregation,
    Emit,
    WindowAggregator,
    retention_suffices,
)
from streamkit.windows.lateness import LateCounter
from streamkit.windows.spec import Duration, Hopping, Session, Sliding, WindowSpec, duration_ms

logger = logging.getLogger(__name__)

EMITS = ("update", "close")

_LATE: weakref.WeakKeyDictionary[Any, dict[str, LateCounter]] = weakref.WeakKeyDictionary()


def late_counter(app: Any, name: str) -> LateCounter:
    """The late-record counter of table (or join) ``name`` of ``app``: one per name, made on
    first use, kept as long as the app.

    >>> import streamkit as sk
    >>> app = sk.App("docs-late")
    >>> late_counter(app, "t").add("window-closed")
    >>> late_counter(app, "t").total, late_counts(app)
    (1, {'t': {'window-closed': 1}})
    """
    counters = _LATE.setdefault(app, {})
    counter = counters.get(name)
    if counter is None:
        counter = counters[name] = LateCounter(name)
    return counter


def late_counts(app: Any) -> dict[str, dict[str, int]]:
    """Late records so far per table (or join) and reason, every windowed table listed."""
    counts = {name: dict(c.by_reason) for name, c in _LATE.get(app, {}).items()}
    for name, table in getattr(app, "tables", {}).items():
        if table.is_windowed:
            counts.setdefault(name, {})
    return dict(sorted(counts.items()))


def late_rates(app: Any) -> dict[str, dict[str, Any]]:
    """The late rate per table (or join): its last interval of records and the last warning
    of a jump (``streamkit.windows.lateness``), every windowed table listed."""
    counters = dict(_LATE.get(app, {}))
    for name, table in getattr(app, "tables", {}).items():
        if table.is_windowed and name not in counters:
            counters[name] = late_counter(app, name)
    return {name: counters[name].rate() for name in sorted(counters)}


def watch_lateness(table: Any, grace_ms: int) -> LateCounter:
    """The late counter of ``table``, told what its warning names: the grace, the table's
    clock (the worker's, once running) and the app's ``max_task_drift_ms``."""
    app = table.app
    counter = late_counter(app, table.name)
    counter.watch(
        grace_ms=grace_ms, clock=lambda: table.clock,
        drift_ms=lambda: getattr(getattr(app, "conf", None), "max_task_drift_ms", 0),
    )
    return counter


class WindowedTable(Table):
    is_windowed = True

    def __init__(
        self,
        app: Any,
        name: str,
        *,
        spec: WindowSpec,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any], Any],
        merger: Callable[[Any, Any], Any] | None = None,
        skip: Callable[[Any], bool] | None = None,
        key_type: Any = None,
        value_type: Any = None,
        key_serializer: str | Serde | None = None,
        value_serializer: str | Serde | None = None,
        partitions: int | None = None,
        store: str | None = None,
        expires: Duration | None = None,
        standby_replicas: int | None = None,
        help: str = "",
    ) -> None:
        if not isinstance(spec, (Hopping, Session, Sliding)):
            raise ConfigError(f"windowed table {name!r}: {spec!r} is not a window (Tumbling, Hopping, Sliding, Session)")
        if isinstance(spec, Session) and merger is None:
            raise ConfigError(f"windowed table {name!r}: session windows need a merger")
        # The changelog carries the driver's store layout as bytes.
        super().__init__(
            app, name, key_serializer="raw", value_serializer="raw", partitions=partitions, store=store,
            standby_replicas=standby_replicas, help=help,
        )
        self.key_type = key_type
        self.value_type = value_type
        self.group_key_serde, self.aggregate_serde = table_serdes(key_type, value_type, key_serializer, value_serializer)
        self.spec = spec
        # Kept from its start (sessions: its end) this long; None: until it closes.
        self.retention_ms = None if expires is None else duration_ms(expires, "expires")
        if self.retention_ms is not None and not retention_suffices(spec, self.retention_ms):
            # Faust accepts it (its windows then expire before they end); here a window is kept
            # until it closes by stream time, so the shorter value is raised to that, once said.
            logger.warning(
                "windowed table %r: expires=%gs is shorter than its windows last (%s): each is kept "
                "until it closes instead", name, self.retention_ms / 1000, spec,
            )
            self.retention_ms = None
        self.late = watch_lateness(self, spec.grace_ms)
        dumps, loads = self.aggregate_serde.dumps, self.aggregate_serde.loads
        self.aggregation: Aggregation[Any, Any] = Aggregation(
            initializer, adder, lambda a: dumps(a) or b"", loads, merger
        )
        self.skip = skip  # values the driver ignores (WindowAggregator's skip)
        self.emit: Emit = "update"
        self._emit_chosen = False
        self.emitted_topic: Any = None  # the topic of emitted windows, once to_stream() asks
        self.late_topic = app.topic(f"{app.id}-late", key_serializer="raw", value_serializer="json", internal=True)

    @property
    def late_records(self) -> int:
        """Records set aside as late by this worker (also on ``/status`` per reason)."""
        return self.late.total

    def choose_emit(self, emit: str) -> None:
        if emit not in EMITS:
            raise ConfigError(f"emit must be one of {EMITS}, not {emit!r}")
        if self._emit_chosen and emit != self.emit:
            raise ConfigError(f"windowed table {self.name!r} already emits on {self.emit!r}")
        self.emit = emit  # type: ignore[assignment]
        self._emit_chosen = True

    def aggregator(self, state: SortedPartition) -> WindowAggregator[Any, Any]:
        """The window driver over one partition's state."""
        return WindowAggregator(
            self.spec, self.aggregation, WindowStoreView(state), emit=self.emit,
            retention_ms=self.retention_ms, late_counter=self.late, skip=self.skip,
        )

    def partition_of(self, key: Any) -> int:
        """The partition ``key``'s hash names: of the group key's bytes (the store's keys are
        window keys, not the group key)."""
        count = self.partition_count
        if count is None:
            raise TableError(f"table {self.name!r} is not running in a worker")
        raw = self.group_key_serde.dumps(key)
        if raw is None:
            raise TableError(f"table {self.name!r}: a key cannot be None")
        return partition_for_key(raw, count)

    # -- reads ----------------------------------------------------------------------------

    def windows(self, key: Any, from_ms: int | None = None, to_ms: int | None = None) -> list[dict[str, Any]]:
        """The windows of ``key`` held here: ``{"start", "end", "value"}`` in start order,
        those overlapping ``[from_ms, to_ms]`` when given. Windows are kept until they expire
        (the spec's size + grace, as Kafka Streams' default retention)."""
        raw = self.group_key_serde.dumps(key)
        if raw is None:
            raise TableError(f"table {self.name!r}: a key cannot be None")
        out = []
        for p in self.held_partitions:
            state = self.partition_state(p)
            if not isinstance(state, SortedPartition):
                continue
            for window in self.aggregator(state).windows(raw):
                if (from_ms is None or window.end_ms > from_ms) and (to_ms is None or window.start_ms <= to_ms):
                    out.append({"start": window.start_ms, "end": window.end_ms, "value": window.value})
        return sorted(out, key=lambda w: (w["start"], w["end"]))

    def items(self) -> Iterator[tuple[Any, Any]]:
        """``((key, (start_ms, end_ms)), value)`` for every window held here."""
        loads = self.group_key_serde.loads
        for p in self.held_partitions:
            state = self.partition_state(p)
            if isinstance(state, SortedPartition):
                for window in self.aggregator(state).windows():
                    yield (loads(window.key), (window.start_ms, window.end_ms)), window.value

    def __getitem__(self, key: Any) -> Any:
        raise TableError(f"windowed table {self.name!r} is read with .windows(key), not [key]")

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TableError(f"windowed table {self.name!r} is written by its pipeline only")

    def __delitem__(self, key: Any) -> None:
        raise TableError(f"windowed table {self.name!r} is written by its pipeline only")
