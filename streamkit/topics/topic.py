"""Topic declarations: a name, partitions, serializers and log configuration.

A ``Topic`` is a declaration the app holds; it does no I/O until the app runs. Sending
through it (``await topic.send(...)``) goes to the running worker's producer, the ``Sender``
the runtime installs on the app, or, in a plain script that runs no worker, to a producer
opened on first use (``streamkit.runtime.standalone``). A send checks the key and value against the declared
``key_type``/``value_type`` first (``None`` always passes: no key, or a tombstone), so a
value of the wrong type is refused with the topic's name instead of being written in a shape
its readers cannot decode.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from types import GenericAlias
from typing import TYPE_CHECKING, Any, Protocol

from streamkit._core.errors import ConfigError, StreamkitError
from streamkit._core.serde import Serde, SerdeError, serde_for
from streamkit.topics import ports

if TYPE_CHECKING:
    from streamkit.app.application import App

Headers = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]]


class NotRunningError(StreamkitError):
    """A send needs a running worker (``streamkit worker`` or ``streamkit.testing``)."""


class Sent(Protocol):
    """Where a record landed (Faust's ``RecordMetadata``)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...


class Sender(Protocol):
    """What the runtime provides to topics: serialize, partition and produce one record."""

    async def send(
        self,
        topic: Topic,
        *,
        key: Any,
        value: Any,
        headers: Headers | None,
        timestamp_ms: int | None,
        partition: int | None,
    ) -> Awaitable[Sent]: ...

    def send_soon(
        self,
        topic: Topic,
        *,
        key: Any,
        value: Any,
        headers: Headers | None,
        timestamp_ms: int | None,
        partition: int | None,
    ) -> None: ...

    async def declare(self, topic: Topic) -> None: ...


def to_ms(value: float | int | timedelta | None, what: str) -> int | None:
    """Seconds (the API's unit, as Faust) or a timedelta, to integer milliseconds."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, (int, float)) and value >= 0:
        return int(value * 1000)
    raise ConfigError(f"{what} must be seconds >= 0 or a timedelta, not {value!r}")


def timestamp_ms(value: int | float | datetime | None) -> int | None:
    """A record timestamp: integer milliseconds, or a datetime."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, int):
        return value
    raise ConfigError(f"timestamp must be integer milliseconds or a datetime, not {value!r}")


def _type_check(type_: Any, serde: Serde) -> Callable[[Any], bool] | None:
    """What a value must satisfy to be sent where ``type_`` is declared (None: anything)."""
    if type_ is None or type_ is Any:
        return None
    if type_ is bool:
        return lambda v: isinstance(v, bool)
    if type_ is int:
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if type_ is float:  # as the JSON and MessagePack decoders: an int is a valid float
        return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    if type_ is bytes:
        return lambda v: isinstance(v, (bytes, bytearray, memoryview))
    if type_ is str and getattr(serde, "name", None) == "str":
        return lambda v: isinstance(v, (str, bytes))  # bytes: the encoded string, as it stores them
    if isinstance(type_, type):
        return lambda v: isinstance(v, type_)

    def round_trips(value: Any) -> bool:  # list[int], a Union...: the typed decoder decides
        try:
            serde.loads(serde.dumps(value))
        except SerdeError:
            return False
        return True

    return round_trips


# Kafka Streams' RepartitionTopicConfig: records stay until the app that wrote them has read
# them (infinite time retention: re-keyed history keeps its old timestamps, which a time
# retention would expire before they are read) and are then deleted by the worker (Kafka
# Streams' purge, ``repartition_purge_interval``); 50 MB segments so a purge frees disk soon.
REPARTITION_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "segment.bytes": "52428800"}


class Topic:
    """A topic declared by an app.

    >>> import streamkit as sk
    >>> app = sk.App("docs")
    >>> orders = app.topic("orders", value_type=dict, partitions=4, retention=3600)
    >>> orders.name, orders.partitions, orders.config["retention.ms"]
    ('orders', 4, '3600000')
    """

    # Subscriptable as Faust's (``Stream[Order]`` in annotations); a runtime alias only.
    def __class_getitem__(cls, item: Any) -> GenericAlias:
        return GenericAlias(cls, item)

    def __init__(
        self,
        app: App,
        name: str,
        *,
        key_type: Any = None,
        value_type: Any = None,
        key_serializer: str | Serde | None = None,
        value_serializer: str | Serde | None = None,
        partitions: int | None = None,
        retention: float | timedelta | None = None,
        compacted: bool = False,
        deleting: bool | None = None,
        config: Mapping[str, str] | None = None,
        internal: bool = False,
        repartition: bool = False,
    ) -> None:
        if partitions is not None and partitions < 1:
            raise ConfigError(f"topic {name!r} needs at least one partition")
        self.app = app
        self.name = name
        self.key_type = key_type
        self.value_type = value_type
        # As in Faust: the topic's serializer, else the record class's, else the app's
        # (key_serializer="raw", value_serializer="json" unless the app says otherwise).
        self.key_serde = serde_for(key_serializer, key_type, default=app.conf.key_serializer)
        self.value_serde = serde_for(value_serializer, value_type, default=app.conf.value_serializer)
        self._key_ok = _type_check(key_type, self.key_serde)
        self._value_ok = _type_check(value_type, self.value_serde)
        # The engine's per-record paths check values with this (None: nothing declared).
        self.value_check: Callable[[Any], None] | None = None if self._value_ok is None else self._check_value
        self.partitions = partitions
        # A repartition topic (an internal hop of the app's own stages): Kafka Streams'
        # configs, and the worker deletes what the app has committed past (``runtime/purge.py``).
        self.repartition = repartition
        self.internal = internal or repartition
        cfg = dict(REPARTITION_CONFIG if repartition else {}) | dict(config or {})
        retention_ms = to_ms(retention, "retention")
        if retention_ms is not None:
            cfg["retention.ms"] = str(retention_ms)
        if compacted:
            cfg["cleanup.policy"] = "compact,delete" if deleting else "compact"
        self.config: dict[str, str] = cfg

    def __repr__(self) -> str:
        return f"<Topic {self.name!r}>"

    def check(self, key: Any, value: Any) -> None:
        """Raise ``SerdeError`` unless ``key`` and ``value`` fit the declared types.

        >>> import streamkit as sk
        >>> counts = sk.App("docs-check").topic("counts", value_type=int)
        >>> counts.check(None, "3")
        Traceback (most recent call last):
        ...
        streamkit._core.serde.SerdeError: topic 'counts' takes values of type int, not str: '3'
        """
        self._check_value(value)
        if key is not None and self._key_ok is not None and not self._key_ok(key):
            raise SerdeError(self._mismatch("keys", self.key_type, key))

    def _check_value(self, value: Any) -> None:
        if value is not None and self._value_ok is not None and not self._value_ok(value):
            raise SerdeError(self._mismatch("values", self.value_type, value))

    def _mismatch(self, what: str, type_: Any, got: Any) -> str:
        shown = repr(got)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        type_name = getattr(type_, "__name__", None) or repr(type_)
        return f"topic {self.name!r} takes {what} of type {type_name}, not {type(got).__name__}: {shown}"

    def _sender(self) -> Sender:
        sender = self.app.sender
        if sender is None:
            raise NotRunningError(
                f"cannot send to {self.name!r}: the app {self.app.id!r} is not running in a worker"
            )
        return sender

    def send_soon(
        self,
        *,
        key: Any = None,
        value: Any = None,
        headers: Headers | None = None,
        timestamp: int | datetime | None = None,
        partition: int | None = None,
    ) -> None:
        """Produce one record without waiting, from plain code (Faust's ``send_soon``): it is
        buffered before this returns, and the worker commits nothing past the record being
        processed until it is stored."""
        self.check(key, value)
        self._sender().send_soon(
            self, key=key, value=value, headers=headers, timestamp_ms=timestamp_ms(timestamp), partition=partition
        )

    async def maybe_declare(self) -> None:
        """Create the topic now unless it exists (a worker creates declared topics anyway)."""
        await (await self._sender_or_script()).declare(self)

    async def _sender_or_script(self) -> Sender:
        """The running worker's sender, else (a plain script) the app's own producer, opened on
        first use on the running event loop (``streamkit.runtime.standalone``)."""
        sender = self.app.sender
        if sender is not None:
            return sender
        # A declaration does not import the runtime; a script that sends needs it: the
        # runtime installed itself in the port (``topics/ports.py``).
        script: Sender = await ports.attach_script(self.app)
        return script

    async def send(
        self,
        *,
        key: Any = None,
        value: Any = None,
        headers: Headers | None = None,
        timestamp: int | datetime | None = None,
        partition: int | None = None,
    ) -> Awaitable[Sent]:
        """Produce one record; returns, as Faust's, a future of the record's metadata
        (``topic``, ``partition``, ``offset``, ``timestamp``): ``await`` it to wait until the log
        acknowledged the record, or read ``done()``/``result()``.

        Inside an agent, a record without ``timestamp`` takes the timestamp of the event being
        processed (event time flows downstream, as in Kafka Streams). From a plain script that
        runs no worker, the first send opens a producer on the app's broker, and each send
        returns once the record is stored, so the script may end without flushing.
        """
        self.check(key, value)
        sender = await self._sender_or_script()
        return await sender.send(
            self,
            key=key,
            value=value,
            headers=headers,
            timestamp_ms=timestamp_ms(timestamp),
            partition=partition,
        )
