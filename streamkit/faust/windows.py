"""Faust's windowed tables: ``app.Table(name, default=int).tumbling(60, expires=3600)``.

``app.Table`` declares a ``FaustTable``: a plain ``Table`` that can also turn itself into a
windowed one, as Faust's ``Table.tumbling`` / ``.hopping`` do (and ``.sliding`` / ``.session``,
which Faust lacks, with Kafka Streams' windows). The app layer declares this subclass, so
``tables/`` needs to know nothing of windows (``tables`` sits below ``windows`` in the layers).

``.tumbling(size, expires=None, grace=0)`` re-declares the (not yet running) table under the
same name as a ``FaustWindowedTable`` and returns a ``WindowWrapper`` over it, the object an
agent uses:

* ``table[k] += 1`` (any in-place operator) and ``table[k] = v`` change every window holding
  the event's time (the record's timestamp; ``relative_to_field``/``relative_to_now``/
  ``relative_to`` choose another, as Faust's); ``del table[k]`` deletes those windows;
* ``table[k].current()`` reads the window of the event's timestamp (the latest one holding it),
  ``.now()`` the window of the wall clock (the earliest one holding it), ``.delta(s)`` the
  window of the event's timestamp minus ``s`` seconds, ``.value()`` the window of the
  relative timestamp; a window not stored reads as ``default()`` (``KeyError`` without one);
* ``items()``, ``keys()``, ``values()`` (each with ``.now()``, ``.current()``, ``.delta(s)``)
  and ``as_ansitable()`` list each key with its value in the window of the relative time.

Underneath is the window driver of declarative windowed tables (``aggregate.py`` over the
table's changelogged sorted store), its aggregate being "apply the agent's operation", so
windows close and expire by **stream time** (the largest timestamp the partition's table has
been written with), not by the wall clock as Faust's do:

* ``on_window_close(key, value)`` gets ``key = (k, (start, end))`` in float seconds, ``end``
  being ``start + size - 0.1`` for tumbling and hopping windows as in Faust (the inclusive ends
  for sliding windows and sessions). It runs once per window, when stream time passes the
  window's end + grace, after the agent is done with the event (it may be async; the event
  counts as processed once it returned). The close progress is committed with the table's
  changelog, so a restarted worker neither fires a window again nor misses one (after a crash
  between a callback and that commit, the callback runs again: at least once, as records).
* A window is deleted (a tombstone in the changelog) once stream time passes its start +
  ``expires`` (default: size + grace, when it closes); ``expires`` keeps closed windows
  readable longer (``.delta``); a shorter ``expires`` (Faust accepts one) keeps each window
  until it closes, with a warning.
* A write whose windows are all closed is late: it changes nothing, the event goes to
  ``<app>-late`` with headers naming the table and the reason, and is counted per table
  (``/metrics``, ``/status``).

>>> import streamkit as sk
>>> app = sk.App("docs-faust-windows")
>>> per_minute = app.Table("views_per_minute", default=int).tumbling(60, expires=3600)
>>> per_minute.name, type(app.tables["views_per_minute"]).__name__
('views_per_minute', 'FaustWindowedTable')
>>> per_minute.table.window_range(60_000, 120_000)
(60.0, 119.9)
"""

from __future__ import annotations

import asyncio
import inspect
import operator
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

from streamkit._core.context import current_event, defer
from streamkit._core.errors import ConfigError
from streamkit.tables.errors import PartitionNotHeldError, TableError
from streamkit.tables.partition import SortedPartition
from streamkit.tables.table import Table, ansitable
from streamkit.windows.aggregate import Step, WindowAggregator, WindowResult
from streamkit.windows.records import late_headers
from streamkit.windows.spec import (
    Duration,
    Hopping,
    Session,
    Sliding,
    Tumbling,
    WindowSpec,
    duration_ms,
)
from streamkit.windows.wtable import WindowedTable

WindowCloseCallback = Callable[[Any, Any], Any]
Operation = Callable[[Any], Any]  # the old value of a window -> its new value
Relative = Callable[[Any], int]  # the event (or None) -> a timestamp in ms

_NO_VALUE: Any = type("_NoValue", (), {"__repr__": lambda self: "<no value>"})()


class FaustTable(Table):
    """The table ``app.Table`` declares: a ``Table``, plus Faust's window methods.

    ``on_window_close(key, value)`` is called when a window of the windowed table closes.
    """

    def __init__(
        self, app: Any, name: str, *, on_window_close: WindowCloseCallback | None = None, **options: Any
    ) -> None:
        if on_window_close is not None and not callable(on_window_close):
            raise ConfigError(f"table {name!r}: on_window_close must be callable, not {on_window_close!r}")
        super().__init__(app, name, **options)
        self.on_window_close = on_window_close
        self._options = options

    def tumbling(
        self, size: Duration, expires: Duration | None = None, grace: Duration = 0, *, key_index: bool = False
    ) -> WindowWrapper:
        """Windows of ``size`` seconds, back to back (Faust's ``tumbling``). ``key_index`` is
        accepted for Faust's code: keys are always listed (the store is ordered by key)."""
        return self._windowed(Tumbling(size, grace=grace), expires)

    def hopping(
        self, size: Duration, step: Duration, expires: Duration | None = None, grace: Duration = 0,
        *, key_index: bool = False,
    ) -> WindowWrapper:
        """Windows of ``size`` seconds starting every ``step`` seconds (Faust's ``hopping``)."""
        return self._windowed(Hopping(size, step, grace=grace), expires)

    def sliding(
        self, max_difference: Duration, expires: Duration | None = None, grace: Duration = 0
    ) -> WindowWrapper:
        """Kafka Streams' sliding windows ``[t - max_difference, t]`` (``windows.Sliding``)."""
        return self._windowed(Sliding(max_difference, grace=grace), expires)

    def session(
        self, gap: Duration, expires: Duration | None = None, grace: Duration = 0,
        *, merger: Callable[[Any, Any], Any] | None = None,
    ) -> WindowWrapper:
        """Sessions of activity less than ``gap`` seconds apart (``windows.Session``); when a
        write bridges two sessions their values become ``merger(a, b)`` (default ``a + b``)."""
        return self._windowed(Session(gap, grace=grace), expires, merger or operator.add)

    def _windowed(
        self, spec: WindowSpec, expires: Duration | None, merger: Callable[[Any, Any], Any] | None = None
    ) -> WindowWrapper:
        app = self.app
        if app.tables.get(self.name) is not self:
            raise ConfigError(f"table {self.name!r} is windowed already (call .tumbling() etc. once)")
        if self.held_partitions:
            raise ConfigError(f"table {self.name!r} is running: window it where it is declared")
        if self.is_global:
            raise ConfigError(f"table {self.name!r}: a global table cannot be windowed")
        options = {k: v for k, v in self._options.items() if k != "is_global"}
        # The windowed table takes this declaration's place (and its changelog topic's, whose
        # records become window keys and aggregates).
        del app.tables[self.name]
        app.topics.pop(self.changelog_topic.name, None)
        try:
            table = FaustWindowedTable(
                app, self.name, spec=spec, expires=expires, merger=merger,
                on_window_close=self.on_window_close, **options,
            )
        except Exception:
            app.tables[self.name] = self
            app.topics[self.changelog_topic.name] = self.changelog_topic
            raise
        app.tables[self.name] = table
        return WindowWrapper(table)


def _apply(aggregate: Any, operation: Operation) -> Any:
    return operation(aggregate)


class FaustWindowedTable(WindowedTable):
    """A windowed table written by agents through a ``WindowWrapper`` (Faust's spelling)."""

    def __init__(
        self,
        app: Any,
        name: str,
        *,
        spec: WindowSpec,
        default: Callable[[], Any] | None = None,
        on_window_close: WindowCloseCallback | None = None,
        merger: Callable[[Any, Any], Any] | None = None,
        expires: Duration | None = None,
        **options: Any,
    ) -> None:
        if default is not None and not callable(default):
            raise ConfigError(f"table {name!r}: default must be callable (like int or list), not {default!r}")
        merge = None
        if merger is not None:
            user_merger = merger

            def merge(a: Any, b: Any) -> Any:
                if a is _NO_VALUE:
                    return b
                return a if b is _NO_VALUE else user_merger(a, b)

        super().__init__(
            app, name, spec=spec, initializer=default if default is not None else _no_value,
            adder=_apply, merger=merge, expires=expires, **options,
        )
        self.default = default
        self.on_window_close = on_window_close
        self.emit = "close" if on_window_close is not None else "none"
        self._emit_chosen = True
        self._drivers: dict[int, tuple[SortedPartition, WindowAggregator[Any, Any]]] = {}
        self._callbacks: set[asyncio.Future[Any]] = set()  # async callbacks run outside an event

    def choose_emit(self, emit: str) -> None:
        raise ConfigError(f"table {self.name!r} is written by agents: its closed windows go to on_window_close")

    # -- windows in Faust's terms ---------------------------------------------------------

    def window_range(self, start_ms: int, end_ms: int) -> tuple[float, float]:
        """A window as Faust names it: ``(start, end)`` seconds, ``end = start + size - 0.1``
        for tumbling and hopping windows (the inclusive end for sliding windows and sessions)."""
        start = start_ms / 1000
        if isinstance(self.spec, Hopping):
            return start, start + self.spec.size_ms / 1000 - 0.1
        return start, end_ms / 1000

    def window_of(self, range_: tuple[float, float]) -> tuple[int, int]:
        """The ``(start_ms, end_ms)`` of a window named as ``window_range`` names it."""
        start_ms = round(range_[0] * 1000)
        if isinstance(self.spec, Hopping):
            return start_ms, start_ms + self.spec.size_ms
        return start_ms, round(range_[1] * 1000)

    def window_at(self, key: Any, ts_ms: int, *, earliest: bool = False) -> tuple[int, int] | None:
        """The window of ``key`` that holds ``ts_ms``: the latest of those (Faust's
        ``current``), or the earliest (Faust's ``earliest``, what ``now()`` reads)."""
        spec = self.spec
        if isinstance(spec, Hopping):
            windows = spec.windows_for(ts_ms)
            return (windows[0] if earliest else windows[-1]) if windows else None
        if isinstance(spec, Sliding):
            return spec.left_window(ts_ms) if ts_ms >= 0 else None
        for window in self.windows_of(key):
            if window.start_ms <= ts_ms <= window.end_ms:
                return window.start_ms, window.end_ms
        return None

    # -- reads and writes ------------------------------------------------------------------

    def _key_bytes(self, key: Any) -> bytes:
        raw = self.group_key_serde.dumps(key)
        if raw is None:
            raise TableError(f"table {self.name!r}: a key cannot be None")
        return raw

    def _driver(self, partition: int) -> tuple[SortedPartition, WindowAggregator[Any, Any]]:
        state = self.partition_state(partition)
        if not isinstance(state, SortedPartition):
            raise PartitionNotHeldError(f"table {self.name!r} has no partition {partition} here")
        held = self._drivers.get(partition)
        if held is None or held[0] is not state:  # (re)assigned: a driver over the new state
            held = self._drivers[partition] = (state, self.aggregator(state))
        return held

    def _partition(self, key: Any) -> int:
        event = current_event.get()
        return event.partition if event is not None else self.partition_of(key)

    def windows_of(self, key: Any) -> list[WindowResult[Any]]:
        """The stored windows of ``key`` (in its partition), by start."""
        return list(self._driver(self._partition(key))[1].windows(self._key_bytes(key)))

    def read(self, key: Any, window: tuple[int, int] | None) -> Any:
        """The value of ``key`` in ``window``: ``default()`` when not stored (KeyError without
        a default)."""
        found = None
        if window is not None:
            found = self._driver(self._partition(key))[1].window(self._key_bytes(key), *window)
        if found is None:
            if self.default is None:
                raise KeyError(key)
            return self.default()
        return found.value

    def has(self, key: Any, window: tuple[int, int] | None) -> bool:
        if window is None:
            return False
        try:
            driver = self._driver(self._partition(key))[1]
        except PartitionNotHeldError:
            return False
        return driver.window(self._key_bytes(key), *window) is not None

    def write(self, key: Any, operation: Operation, ts_ms: int) -> None:
        """Apply ``operation`` to every open window of ``key`` holding ``ts_ms``."""
        event = current_event.get()
        state, driver = self._driver(event.partition if event is not None else self.partition_of(key))
        state.timestamp_ms = event.timestamp if event is not None else ts_ms
        if event is not None:
            self.late.sources.add(event.topic)  # a repartition topic among them: named by its warning
        self._after(key, driver.process(self._key_bytes(key), ts_ms, operation), event)

    def delete(self, key: Any, ts_ms: int) -> None:
        """Delete the windows of ``key`` holding ``ts_ms`` (Faust's ``del table[k]``)."""
        event = current_event.get()
        state, driver = self._driver(event.partition if event is not None else self.partition_of(key))
        state.timestamp_ms = event.timestamp if event is not None else ts_ms
        raw = self._key_bytes(key)
        inclusive = not isinstance(self.spec, Hopping)
        for window in list(driver.windows(raw)):
            if window.start_ms <= ts_ms < window.end_ms + inclusive:
                driver.remove(raw, window.start_ms, window.end_ms)

    def _after(self, key: Any, step: Step[Any, Any], event: Any) -> None:
        late = step.late
        if late is not None:
            self.late_topic.send_soon(
                key=late.key,
                value=event.value if event is not None else None,
                headers=late_headers(self.name, late.reason, late.ts_ms, late.stream_time_ms),
            )
        callback = self.on_window_close
        if callback is None:
            return
        loads = self.group_key_serde.loads
        for window in step.emitted:
            self._fire(callback, (loads(window.key), self.window_range(window.start_ms, window.end_ms)), window.value)

    def _fire(self, callback: WindowCloseCallback, key: Any, value: Any) -> None:
        async def run() -> None:
            result = callback(key, value)
            if inspect.isawaitable(result):
                await result

        if defer(run):
            return
        # Outside an agent (a timer writing relative to now): nothing awaits the event.
        result = callback(key, value)
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._callbacks.add(task)
            task.add_done_callback(self._callbacks.discard)

    def keyed_values(self, pick: Callable[[Any], tuple[int, int] | None]) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` for each key held (inside an agent: in the event's partition) with
        a value in the window ``pick(key)`` names, in key order per partition."""
        event = current_event.get()
        partitions = [event.partition] if event is not None else self.held_partitions
        loads = self.group_key_serde.loads
        for p in partitions:
            if not isinstance(self.partition_state(p), SortedPartition):
                continue
            driver = self._driver(p)[1]
            current: Any = _NO_VALUE
            windows: dict[tuple[int, int], Any] = {}
            for window in [*driver.windows(), None]:
                raw = None if window is None else window.key
                if raw != current and current is not _NO_VALUE:
                    key = loads(current)
                    chosen = pick(key)
                    if chosen is not None and chosen in windows:
                        yield key, windows[chosen]
                    windows = {}
                if window is None:
                    break
                current = raw
                windows[(window.start_ms, window.end_ms)] = window.value


def _no_value() -> Any:
    return _NO_VALUE


def _required(value: Any, key: Any) -> Any:
    if value is _NO_VALUE:
        raise KeyError(key)
    return value


def _seconds_to_ms(value: Any, what: str) -> int:
    """A timestamp as Faust's relative handlers give it (seconds, a datetime, an ISO-8601
    string) in integer milliseconds."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise TableError(f"{what} {value!r} is not an ISO-8601 time") from None
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return round(value * 1000)
    raise TableError(f"{what} must be seconds, a datetime or an ISO-8601 string, not {value!r}")


class WindowWrapper:
    """Faust's ``WindowWrapper``: a windowed table as an agent reads and writes it.

    ``table[k]`` is a ``WindowSet`` (all windows of ``k``); which window a write or
    ``.value()`` uses follows the wrapper's time relativity: the event's timestamp by default
    (``relative_to_stream``), ``relative_to_now()`` (the worker's clock),
    ``relative_to_field(Record.field)`` (a field of the event's value, in seconds or a
    datetime) or ``relative_to(ts)`` (fixed seconds/datetime, or a function of the event).
    """

    def __init__(self, table: FaustWindowedTable, relative: Relative | None = None) -> None:
        self.table = table
        self._relative = relative

    def __repr__(self) -> str:
        return f"<WindowWrapper {self.table.name!r} {self.table.spec!r}>"

    @property
    def name(self) -> str:
        return self.table.name

    # -- time relativity -----------------------------------------------------------------

    def relative_to(self, ts: Any) -> WindowWrapper:
        """Windows relative to ``ts``: seconds, a datetime, a field, or a function of the
        event returning one of those."""
        if ts is None:
            return WindowWrapper(self.table)
        if isinstance(ts, (datetime, int, float)) and not isinstance(ts, bool):
            fixed = _seconds_to_ms(ts, "relative_to")
            return WindowWrapper(self.table, lambda event: fixed)
        if _is_field(ts):
            return self.relative_to_field(ts)
        if callable(ts):
            fn = ts
            return WindowWrapper(self.table, lambda event: _seconds_to_ms(fn(event), "relative_to's timestamp"))
        raise ConfigError(f"relative_to takes seconds, a datetime, a field or a function, not {ts!r}")

    def relative_to_now(self) -> WindowWrapper:
        """Windows relative to the worker's (wall) clock."""
        table = self.table
        return WindowWrapper(table, lambda event: table.clock.now_ms())

    def relative_to_stream(self) -> WindowWrapper:
        """Windows relative to the timestamp of the event being processed (the default)."""
        return WindowWrapper(self.table)

    def relative_to_field(self, field: Any) -> WindowWrapper:
        """Windows relative to ``field`` of the event's value: a Record field
        (``Order.created``) or a field name; seconds, a datetime or an ISO-8601 string."""
        if isinstance(field, str):
            name = field

            def read(value: Any) -> Any:
                return value[name] if isinstance(value, dict) else getattr(value, name)
        elif _is_field(field):
            def read(value: Any) -> Any:
                return field.__get__(value)
        else:
            raise ConfigError(f"relative_to_field takes a record field or a field name, not {field!r}")

        def relative(event: Any) -> int:
            if event is None:
                raise TableError(f"windowed table {self.name!r}: relative to a field, outside of an agent's event")
            return _seconds_to_ms(read(event.value), "the relative field")

        return WindowWrapper(self.table, relative)

    def timestamp_ms(self, event: Any = None) -> int:
        """The time a write (or ``value()``) places itself at, in ms."""
        event = event if event is not None else current_event.get()
        if self._relative is not None:
            return self._relative(event)
        if event is None:
            raise TableError(
                f"windowed table {self.name!r}: no event being processed to take the time from "
                f"(outside an agent read .now(), or use relative_to_now())"
            )
        return int(event.timestamp)

    def get_timestamp(self, event: Any = None) -> float:
        """Faust's ``get_timestamp``: ``timestamp_ms`` in seconds."""
        return self.timestamp_ms(event) / 1000

    # -- the dict interface ----------------------------------------------------------------

    def __getitem__(self, key: Any) -> WindowSet:
        return WindowSet(key, self, current_event.get())

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, WindowSet):
            return  # ``table[k] += 1``: the WindowSet wrote itself already
        if value is None:
            raise TableError(f"table {self.name!r}: None is a tombstone; use del table[key]")
        self.table.write(key, lambda _old: value, self.timestamp_ms())

    def __delitem__(self, key: Any) -> None:
        self.table.delete(key, self.timestamp_ms())

    def __contains__(self, key: Any) -> bool:
        ts = self.timestamp_ms()
        return self.table.has(key, self.table.window_at(key, ts))

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())

    def __len__(self) -> int:
        return sum(1 for _ in self.keys())

    def keys(self, event: Any = None) -> WindowedKeysView:
        return WindowedKeysView(self, event if event is not None else current_event.get())

    def values(self, event: Any = None) -> WindowedValuesView:
        return WindowedValuesView(self, event if event is not None else current_event.get())

    def items(self, event: Any = None) -> WindowedItemsView:
        return WindowedItemsView(self, event if event is not None else current_event.get())

    def windows(self, key: Any, from_ms: int | None = None, to_ms: int | None = None) -> list[dict[str, Any]]:
        """Every window of ``key`` held here (``WindowedTable.windows``)."""
        return self.table.windows(key, from_ms, to_ms)

    def as_ansitable(self, title: str = "{table.name}", **kwargs: Any) -> str:
        """The keys with their value in the window of the relative time, as a text table."""
        return ansitable(self.items(), title=title.format(table=self.table), **kwargs)

    # -- views' iteration ------------------------------------------------------------------

    def _items_at(self, ts_ms: int, *, earliest: bool = False) -> Iterator[tuple[Any, Any]]:
        table = self.table
        return table.keyed_values(lambda key: table.window_at(key, ts_ms, earliest=earliest))

    def _items(self, event: Any) -> Iterator[tuple[Any, Any]]:
        return self._items_at(self.timestamp_ms(event))

    def _items_now(self) -> Iterator[tuple[Any, Any]]:
        return self._items_at(self.table.clock.now_ms(), earliest=True)

    def _items_current(self, event: Any) -> Iterator[tuple[Any, Any]]:
        return self._items_at(_event_ms(self.table, event))

    def _items_delta(self, d: Duration, event: Any) -> Iterator[tuple[Any, Any]]:
        return self._items_at(_event_ms(self.table, event) - duration_ms(d, "delta"))


def _is_field(value: Any) -> bool:
    return type(value).__name__ == "member_descriptor" and hasattr(value, "__get__")


def _event_ms(table: FaustWindowedTable, event: Any) -> int:
    event = event if event is not None else current_event.get()
    if event is None:
        raise TableError(f"windowed table {table.name!r}: .current() and .delta() read the event's time, outside of one")
    return int(event.timestamp)


class WindowSet:
    """Faust's ``WindowSet``: the windows of one key (``table[k]``).

    In-place operators (``+=``, ``-=``, ``|=``, ...) apply to every window holding the
    relative time; ``current()``, ``now()``, ``delta(s)`` and ``value()`` read one window;
    ``ws[(start, end)]`` reads a window by its range (as ``on_window_close`` names it).
    """

    def __init__(self, key: Any, wrapper: WindowWrapper, event: Any = None) -> None:
        self.key = key
        self.wrapper = wrapper
        self.table = wrapper.table
        self.event = event

    def __repr__(self) -> str:
        return f"<WindowSet {self.table.name!r}[{self.key!r}]>"

    def apply(self, op: Callable[[Any, Any], Any], value: Any, event: Any = None) -> WindowSet:
        """Set every window holding the relative time to ``op(old, value)``."""
        key = self.key
        self.table.write(key, lambda old: op(_required(old, key), value), self.wrapper.timestamp_ms(event or self.event))
        return self

    def value(self, event: Any = None) -> Any:
        """The value in the window of the relative time (the latest window holding it)."""
        ts = self.wrapper.timestamp_ms(event or self.event)
        return self.table.read(self.key, self.table.window_at(self.key, ts))

    def current(self, event: Any = None) -> Any:
        """The value in the window of the event's timestamp (the latest window holding it)."""
        ts = _event_ms(self.table, event or self.event)
        return self.table.read(self.key, self.table.window_at(self.key, ts))

    def now(self) -> Any:
        """The value in the window of the worker's clock (the earliest window holding now)."""
        ts = self.table.clock.now_ms()
        return self.table.read(self.key, self.table.window_at(self.key, ts, earliest=True))

    def delta(self, d: Duration | timedelta, event: Any = None) -> Any:
        """The value in the window of the event's timestamp minus ``d`` seconds."""
        ts = _event_ms(self.table, event or self.event) - duration_ms(d, "delta")
        return self.table.read(self.key, self.table.window_at(self.key, ts))

    def __getitem__(self, window: Any) -> Any:
        if isinstance(window, tuple) and len(window) == 2:
            return self.table.read(self.key, self.table.window_of(window))
        return WindowSet(self.key, self.wrapper, window)  # ``table[k][event]``, as Faust's

    def _op(op: Callable[[Any, Any], Any]) -> Callable[[WindowSet, Any], WindowSet]:  # type: ignore[misc]
        def inplace(self: WindowSet, other: Any) -> WindowSet:
            return self.apply(op, other)

        return inplace

    __iadd__ = _op(operator.add)
    __isub__ = _op(operator.sub)
    __imul__ = _op(operator.mul)
    __itruediv__ = _op(operator.truediv)
    __ifloordiv__ = _op(operator.floordiv)
    __imod__ = _op(operator.mod)
    __ipow__ = _op(operator.pow)
    __ilshift__ = _op(operator.lshift)
    __irshift__ = _op(operator.rshift)
    __iand__ = _op(operator.and_)
    __ixor__ = _op(operator.xor)
    __ior__ = _op(operator.or_)
    del _op


class _View:
    def __init__(self, wrapper: WindowWrapper, event: Any) -> None:
        self._wrapper = wrapper
        self.event = event

    def _pairs(self) -> Iterator[tuple[Any, Any]]:
        return self._wrapper._items(self.event)

    def _now(self) -> Iterator[tuple[Any, Any]]:
        return self._wrapper._items_now()

    def _current(self, event: Any) -> Iterator[tuple[Any, Any]]:
        return self._wrapper._items_current(event or self.event)

    def _delta(self, d: Duration, event: Any) -> Iterator[tuple[Any, Any]]:
        return self._wrapper._items_delta(d, event or self.event)

    def __len__(self) -> int:
        return sum(1 for _ in self._pairs())


class WindowedItemsView(_View):
    """``table.items()``: ``(key, value)`` in the window of the relative time; ``.now()``,
    ``.current()`` and ``.delta(s)`` choose another window."""

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return self._pairs()

    def now(self) -> Iterator[tuple[Any, Any]]:
        return self._now()

    def current(self, event: Any = None) -> Iterator[tuple[Any, Any]]:
        return self._current(event)

    def delta(self, d: Duration, event: Any = None) -> Iterator[tuple[Any, Any]]:
        return self._delta(d, event)


class WindowedKeysView(_View):
    """``table.keys()``: the keys with a value in the window of the relative time."""

    def __iter__(self) -> Iterator[Any]:
        return (k for k, _ in self._pairs())

    def now(self) -> Iterator[Any]:
        return (k for k, _ in self._now())

    def current(self, event: Any = None) -> Iterator[Any]:
        return (k for k, _ in self._current(event))

    def delta(self, d: Duration, event: Any = None) -> Iterator[Any]:
        return (k for k, _ in self._delta(d, event))


class WindowedValuesView(_View):
    """``table.values()``: the values in the window of the relative time."""

    def __iter__(self) -> Iterator[Any]:
        return (v for _, v in self._pairs())

    def now(self) -> Iterator[Any]:
        return (v for _, v in self._now())

    def current(self, event: Any = None) -> Iterator[Any]:
        return (v for _, v in self._current(event))

    def delta(self, d: Duration, event: Any = None) -> Iterator[Any]:
        return (v for _, v in self._delta(d, event))


__all__ = [
    "FaustTable",
    "FaustWindowedTable",
    "WindowSet",
    "WindowWrapper",
    "WindowedItemsView",
    "WindowedKeysView",
    "WindowedValuesView",
]
