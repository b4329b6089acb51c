"""The merge of a reader task's inputs written by its own worker's aligned tasks (a windowed join
after a re-key): in the writers' order, waiting for an input they may still write.

The aligner (``alignment.py``) makes a group's writers hand their records out in the
timestamp-merged order of their source partitions; each record leaves at a **key**, its
writer's stream time then. A reader of several of their topics (the join task of partition p
reads p of both sides' repartition topics) must take the records in that same order, or its
stream time runs ahead on one side and records of the other turn late (issue 22):

* each writer of a merged topic stamps what it sends with its key (header
  ``streamkit.order``: the key, 8 bytes big-endian, then the worker's nonce, 8 bytes) and
  notes the key per partition until the record reaches an inbox here (``Stamps``: the records
  carrying this worker's nonce are counted as they are fetched);
* the reader takes the record with the lowest ``(key, rank)`` among its inputs' next ones
  (``rank``: of the agent writing the input, the aligner's tie-break), as a heap merge would;
* when an input is empty, its next record's key is not known: the reader goes on only with
  records below what that input is **known complete** up to: the key of the first record sent
  to it that has not arrived, else the lowest key its writers in this worker may still hand
  out (``Aligner.floor``: a writer's next record's key, or its stream time while it is empty
  and not idle). Until the input was once caught up (lag 0: every record an earlier run wrote
  fetched) it is known complete up to nothing. Else the reader waits: records reaching an
  inbox wake it; a writer's progress does not, so it looks again every ``POLL_S``.

Kafka Streams' task merges its partitions by their head records' timestamps and, with one
empty, waits for ``max.task.idle.ms`` (KIP-353/695): its answers then depend on fetch timing.
Here the writers are known, so the reader waits exactly as long as an input may still get an
earlier record, and no longer. The difference of order (the writers' keys, not the records'
own timestamps) is deliberate: it is the order of the source partitions, which the model, a
live run and a restart share, where the timestamps of two repartitioned inputs interleave
according to how the writers happened to run.

A writer that turned idle (``max_task_idle_ms``) holds the reader back no more than it holds
the other writers. With an app's tasks spread over several workers, what another worker's
writers send is not waited for once the input was caught up (the bound holds per worker, as
the aligner's does). A reader that waited ``alignment.LAGGING_HOLD_S`` goes on (logged): what
a task sent under a transaction that was aborted (a task lost in a rebalance, under
exactly-once) never arrives, and stays in flight.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from streamkit._core.types import TopicPartition
from streamkit.agents.agent import Agent
from streamkit.app.application import App
from streamkit.runtime.alignment import LAGGING_HOLD_S, Aligner
from streamkit.runtime.inbox import CHUNK, Inbox, current_event
from streamkit.runtime.outputs import Forward, forward_to_sinks
from streamkit.runtime.sender import RuntimeSender
from streamkit.topics.topic import Topic
from streamkit.transport.base import ConsumerRecord

logger = logging.getLogger(__name__)
ORDER_HEADER = "streamkit.order"
POLL_S = 0.002  # how often a waiting reader looks at its writers again
_KEY = struct.Struct(">q")
_pack_key = _KEY.pack
_unpack_key = _KEY.unpack_from
FLIGHT_RUNS = 10_000  # runs of keys kept per partition; past that, new sends join the last run


@dataclass
class Stamps:
    """One aligned group's order stamps: the worker's nonce, and per partition of a merged
    topic the keys of the records its writers sent that have not reached an inbox here yet.

    Those keys, in the order sent (a partition's keys never go down: the writers hand records
    out in key order), are kept as runs ``[key, count]``. Past ``FLIGHT_RUNS`` runs (a reader far
    behind its writers) a new send joins the last run under that run's key, which is no later
    than its own: a reader then waits longer than it must, never less."""

    topics: set[str] = field(default_factory=set)
    nonce: bytes = field(default_factory=lambda: os.urandom(8))
    flight: dict[tuple[str, int], deque[list[int]]] = field(default_factory=dict)
    counted_to: dict[tuple[str, int], int] = field(default_factory=dict)  # offsets below were counted

    def header(self, key: int) -> tuple[tuple[str, bytes]]:
        return ((ORDER_HEADER, _pack_key(key) + self.nonce),)

    def sending(self, where: tuple[str, int], key: int) -> None:
        """A writer sends a record stamped ``key`` to partition ``where``."""
        runs = self.flight.get(where)
        if runs is None:
            runs = self.flight[where] = deque()
        if runs and (runs[-1][0] == key or len(runs) >= FLIGHT_RUNS):
            runs[-1][1] += 1
        else:
            runs.append([key, 1])

    def count_arrivals(self, tp: TopicPartition, records: Sequence[ConsumerRecord]) -> None:
        """Records fetched into an inbox of ``tp``: this worker's are no longer in flight (a
        record fetched again, after a rebalance, counts once)."""
        where = (tp.topic, tp.partition)
        start = self.counted_to.get(where, -1)
        if records[-1].offset < start:
            return
        nonce = self.nonce
        mine = 0
        for record in records:
            headers = record.headers
            if record.offset >= start and headers:
                value = headers[0][1]
                if value is not None and value.endswith(nonce):
                    mine += 1
        self.counted_to[where] = records[-1].offset + 1
        runs = self.flight.get(where)
        while mine and runs:
            run = runs[0]
            if run[1] > mine:
                run[1] -= mine
                break
            mine -= run[1]
            runs.popleft()

    def first_in_flight(self, tp: TopicPartition) -> int | None:
        """The key of the first record sent to ``tp`` that has not arrived (None: none)."""
        runs = self.flight.get((tp.topic, tp.partition))
        return runs[0][0] if runs else None


@dataclass(frozen=True)
class MergePlan:
    """How a reader agent merges its inputs: per input topic, the ranks of the agents writing
    it (in its aligner) and its rank on a tie (the lowest of them)."""

    aligner: Aligner
    stamps: Stamps
    writers: dict[str, frozenset[int]]
    readers: weakref.WeakSet[InputMerge] = field(default_factory=weakref.WeakSet)  # for ``status``

    def rank(self, topic: str) -> int:
        return min(self.writers[topic])

    def status(self) -> list[dict[str, Any]]:
        """Each reader task merging these inputs: how often it waited, and whether it waits."""
        return sorted(
            ({"task": r.name, "waits": r.waits, "state": "waiting for its writers" if r.waiting else "running"}
             for r in self.readers),
            key=lambda found: str(found["task"]),
        )


def order_key(record: ConsumerRecord) -> int:
    """The key a record was stamped with; its timestamp when it carries none."""
    headers = record.headers
    if headers:
        name, value = headers[0]
        if name == ORDER_HEADER and value is not None and len(value) >= 8:
            return int(_unpack_key(value)[0])
    return record.timestamp


class InputMerge:
    """One reader task's merge of its inputs (see the module docstring)."""

    def __init__(self, plan: MergePlan, inboxes: Sequence[Inbox], name: str) -> None:
        self._plan = plan
        self._inboxes = list(inboxes)
        self._ranks = [plan.rank(inbox.topic_name) for inbox in self._inboxes]
        self._writers = [plan.writers[inbox.topic_name] for inbox in self._inboxes]
        self.name = name
        plan.readers.add(self)
        self.poll_s = POLL_S
        self.waiting = False  # the last take found records it may not hand out yet
        self._waiting_since: float | None = None
        self.waits = 0
        self._caught_up: set[int] = set()  # inputs whose lag was 0 since this task started

    def take(self) -> tuple[list[ConsumerRecord], list[Inbox]] | None:
        """The next records in the writers' order and their inboxes; None when there are none
        (``waiting`` says whether some are held back)."""
        inboxes = self._inboxes
        ranks = self._ranks
        peeks: list[tuple[Sequence[ConsumerRecord], int, int]] = []
        live: list[int] = []
        empty: list[int] = []
        for k, inbox in enumerate(inboxes):
            peek = inbox.peek(CHUNK)
            peeks.append(peek)
            (live if peek[1] < peek[2] else empty).append(k)
        if not live:
            self.waiting = False
            self._waiting_since = None
            return None
        # Below what every empty input is known complete up to (exclusive, with its rank).
        stop = (2**63, 0)
        for k in empty:
            floor = self._complete_to(k)
            if floor is None:
                return self._wait()
            if (floor, ranks[k]) < stop:
                stop = (floor, ranks[k])
        at = [peek[1] for peek in peeks]
        keys = {k: order_key(peeks[k][0][at[k]]) for k in live}
        records: list[ConsumerRecord] = []
        owners: list[Inbox] = []
        taken = [0] * len(inboxes)
        while len(records) < CHUNK:
            best = min(live, key=lambda k: (keys[k], ranks[k]))
            if (keys[best], ranks[best]) >= stop:
                break
            batch, _start, end = peeks[best]
            records.append(batch[at[best]])
            owners.append(inboxes[best])
            at[best] += 1
            taken[best] += 1
            if at[best] == end:
                break  # past here the choice depends on records not looked at
            keys[best] = order_key(batch[at[best]])
        if not records:
            return self._wait()
        for inbox, count in zip(inboxes, taken, strict=True):
            if count:
                inbox.take_chunk(count)
        self.waiting = False
        self._waiting_since = None
        return records, owners

    def _complete_to(self, k: int) -> int | None:
        """The key below which input ``k`` (empty now) will get no more records; None when
        not known: the log held records of it not fetched (an earlier run's) when last asked."""
        plan = self._plan
        tp = self._inboxes[k].tp
        if k not in self._caught_up:
            # Once caught up (lag 0 after this task started), every record written before it
            # started was fetched; what comes since is this worker's writers' (in flight).
            lag = plan.aligner.lag_of(tp)
            if lag is None or lag > 0:
                return None
            self._caught_up.add(k)
        floor = plan.aligner.floor(self._writers[k])
        first = plan.stamps.first_in_flight(tp)
        return floor if first is None or floor < first else first

    def _wait(self) -> tuple[list[ConsumerRecord], list[Inbox]] | None:
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
            self.waits += 1
        elif now - self._waiting_since >= LAGGING_HOLD_S:
            logger.warning(
                "task %s waited %.0f s for an empty input its worker's tasks may still write; going on "
                "without it", self.name, LAGGING_HOLD_S,
            )
            self._waiting_since = None
            return self._take_any()
        self.waiting = True
        return None

    def _take_any(self) -> tuple[list[ConsumerRecord], list[Inbox]] | None:
        """The next records of the input with the lowest next key, waiting for nothing."""
        heads = [(order_key(batch[start]), self._ranks[k], k) for k, inbox in enumerate(self._inboxes)
                 for batch, start, end in (inbox.peek(CHUNK),) if start < end]
        if not heads:
            return None
        inbox = self._inboxes[min(heads)[2]]
        chunk = list(inbox.take_chunk(CHUNK))
        self.waiting = False
        return chunk, [inbox] * len(chunk)


def stamped_forwarder(
    app: App, agent: Agent, sink: Topic, sender: RuntimeSender, aligner: Aligner, rank: int, stamps: Stamps
) -> Forward:
    """What sends each value an aligned writer of a merged topic yields: with the key its
    record left its task at, counted per partition (see the module docstring)."""
    get_event = current_event.get
    check = sink.value_check
    members = aligner.by_order
    sending = stamps.sending
    send = sender.send_nowait
    name = sink.name

    async def declared(value: Any, event: Any) -> None:
        await sender.declare(sink)
        wait = forward(value, event)
        if wait is not None:
            await wait

    def forward(value: Any, event: Any = None) -> Any:
        event = event or get_event()
        if event is None or app.sender is None:
            return forward_to_sinks(agent, value, event)
        if check is not None:
            check(value)
        partition = sender.place(sink, event.key)
        if partition is None:  # the partition count is not known yet
            return declared(value, event)
        member = members.get((rank, event.partition))
        stream_time = None if member is None else member.stream_time
        key = event.timestamp if stream_time is None else stream_time
        sending((name, partition), key)
        return send(sink, event.key, value, event.timestamp, partition, stamps.header(key))

    return forward
