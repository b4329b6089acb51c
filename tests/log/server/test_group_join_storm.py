"""Consumers that join one group at the same moment: the group settles, each partition once.

Regression test for a rebalance storm seen with two ``streamkit worker`` processes started
together: the members rejoined every ~100 ms forever, generations alternating between them,
no SyncGroup ever succeeding. The cause is in aiokafka (0.14 and earlier): with more than one
assignor configured, one rejoin sends one JoinGroup per assignor, each naming one more
protocol than the last (aio-libs/aiokafka#1168). Each JoinGroup after the first carries
protocols that differ from those the member joined with, which, by Kafka's rules (and
ours), sends a CompletingRebalance or Stable group back to PreparingRebalance. Once two
members are one JoinGroup out of step, each one's second JoinGroup ends the generation the
other one just joined, and they never get back in step. The streamkit consumer therefore
offers a single protocol; ``test_aiokafka_joins_once_per_assignor`` watches for the day
aiokafka sends one JoinGroup per rejoin again.

Every trial starts its consumers at once on a fresh group. A group is settled when every
consumer holds a non-empty share of the topic's partitions, the shares cover each partition
once, and the broker (DescribeGroups) shows the group Stable with exactly those members and
those assignments: a member still between JoinGroups has no share, so a storm never passes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import InconsistentGroupProtocolError

from streamkit._core.types import TopicPartition
from streamkit.transport.kafka import KafkaConsumer
from streamkit.transport.placement import MemberInfo
from tests.support.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 6
TRIALS = 4
SETTLE_S = 10.0  # groups here settle within about a heartbeat interval; a storm never does
STOP_S = 30.0
CHECK_S = 0.05  # how often the test looks at the group


@dataclass
class Member:
    """One consumer under test, whichever client it is."""

    start: Callable[[], Awaitable[None]]
    poll: Callable[[], Awaitable[object]]
    partitions: Callable[[], set[int]]
    stop: Callable[[], Awaitable[None]]


class _NoListener:
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        return None

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        return None


def streamkit_member(bootstrap: str, group: str, topic: str, index: int) -> Member:
    consumer = KafkaConsumer(bootstrap, group, "earliest")
    consumer.subscribe([topic], _NoListener())
    consumer.advertise(MemberInfo(f"http://127.0.0.1:{9000 + index}", 1))
    return Member(
        start=consumer.start,
        poll=lambda: consumer.getmany(50, 100),
        partitions=lambda: {tp.partition for tp in consumer.assignment()},
        stop=consumer.aclose,
    )


def aiokafka_member(bootstrap: str, group: str, topic: str, index: int) -> Member:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        heartbeat_interval_ms=1_000,
    )
    return aiokafka_member_of(consumer)


@pytest.fixture
async def admin(broker: BrokerProcess) -> AsyncIterator[AIOKafkaAdminClient]:
    client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def make_topic(admin: AIOKafkaAdminClient, name: str) -> str:
    await admin.create_topics([NewTopic(name, PARTITIONS, 1)])
    return name


async def broker_view(admin: AIOKafkaAdminClient, group: str) -> tuple[str, list[set[int]]]:
    """The group's state and each member's stored assignment, as DescribeGroups tells."""
    (response,) = await admin.describe_consumer_groups([group])
    (described,) = response.groups
    _error, _group_id, state, _type, _protocol, members, *_ = described
    shares = []
    for member in members:
        assignment_bytes = member[-1]
        decoded = ConsumerProtocolMemberAssignment.decode(assignment_bytes) if assignment_bytes else None
        shares.append({p for _topic, parts in (decoded.assignment if decoded else []) for p in parts})
    return state, shares


async def keep_polling(member: Member) -> None:
    """Poll as an application does; aiokafka joins and syncs in the background meanwhile."""
    while True:
        await member.poll()  # waits, unbounded, while the consumer rebalances


async def wait_settled(admin: AIOKafkaAdminClient, group: str, members: Sequence[Member]) -> float:
    """Seconds until the group settles; fails after ``SETTLE_S`` with what was seen last."""
    started = time.monotonic()
    last: object = None
    while time.monotonic() - started < SETTLE_S:
        local = [m.partitions() for m in members]
        last = local
        covered = sorted(p for share in local for p in share) == list(range(PARTITIONS))
        if covered and all(local):
            state, stored = await broker_view(admin, group)
            last = (local, state, stored)
            if state == "Stable" and sorted(map(sorted, stored)) == sorted(map(sorted, local)):
                return time.monotonic() - started
        await asyncio.sleep(CHECK_S)
    raise AssertionError(f"group {group} did not settle in {SETTLE_S} s; last seen: {last}")


async def stop_all(members: Sequence[Member]) -> bool:
    """Stop every member at once; False if some did not stop within ``STOP_S``."""
    stops = [asyncio.ensure_future(m.stop()) for m in members]
    _done, pending = await asyncio.wait(stops, timeout=STOP_S)
    for task in pending:
        task.cancel()
    return not pending


async def run_trials(
    admin: AIOKafkaAdminClient, bootstrap: str, name: str, count: int,
    make: Callable[[str, str, str, int], Member],
) -> list[float]:
    """Settle times of ``TRIALS`` groups of ``count`` members that each start at once."""
    topic = await make_topic(admin, name)
    settle_s = []
    for trial in range(TRIALS):
        group = f"{name}-g{trial}"
        members = [make(bootstrap, group, topic, i) for i in range(count)]
        pollers: list[asyncio.Task[None]] = []
        try:
            await asyncio.gather(*(m.start() for m in members))  # all join at once
            pollers = [asyncio.create_task(keep_polling(m)) for m in members]
            settle_s.append(await wait_settled(admin, group, members))
        finally:
            for poller in pollers:
                poller.cancel()
            await asyncio.gather(*pollers, return_exceptions=True)
            stopped = await stop_all(members)
        assert stopped, f"the consumers of {group} did not stop within {STOP_S} s"
    return settle_s


@pytest.mark.parametrize("count", [2, 3])
async def test_streamkit_consumers_joining_at_once_settle(
    broker: BrokerProcess, admin: AIOKafkaAdminClient, unique: str, count: int
) -> None:
    await run_trials(admin, broker.bootstrap, unique, count, streamkit_member)


@pytest.mark.parametrize("count", [2, 3])
async def test_aiokafka_consumers_joining_at_once_settle(
    broker: BrokerProcess, admin: AIOKafkaAdminClient, unique: str, count: int
) -> None:
    await run_trials(admin, broker.bootstrap, unique, count, aiokafka_member)


async def first_generation(consumer: AIOKafkaConsumer) -> int:
    """The generation a lone consumer settles in (aiokafka's coordinator state: a test peek)."""

    async def assigned() -> None:
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=50)

    await asyncio.wait_for(assigned(), SETTLE_S)
    generation = consumer._coordinator.generation
    assert isinstance(generation, int)
    return generation


async def test_streamkit_consumer_joins_with_one_join_group(
    broker: BrokerProcess, admin: AIOKafkaAdminClient, unique: str
) -> None:
    """A lone member's first join completes generation 1: one rejoin, one JoinGroup."""
    topic = await make_topic(admin, unique)
    consumer = KafkaConsumer(broker.bootstrap, f"{unique}-g", "earliest")
    consumer.subscribe([topic], _NoListener())
    await consumer.start()
    try:
        assert await first_generation(consumer._consumer) == 1
    finally:
        await asyncio.wait_for(consumer.aclose(), STOP_S)


async def test_aiokafka_joins_once_per_assignor(
    broker: BrokerProcess, admin: AIOKafkaAdminClient, unique: str
) -> None:
    """The aiokafka behaviour the streamkit consumer works around (aio-libs/aiokafka#1168).

    With two assignors a lone member sends two JoinGroups, the second with one more
    protocol, so its first settled generation is 2. If this fails, aiokafka sends one
    JoinGroup per rejoin: ``KafkaConsumer`` may offer a fallback protocol again.
    """
    topic = await make_topic(admin, unique)
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=broker.bootstrap, group_id=f"{unique}-g",
        enable_auto_commit=False,
        partition_assignment_strategy=(RangePartitionAssignor, RoundRobinPartitionAssignor),
    )
    await consumer.start()
    try:
        assert await first_generation(consumer) == 2
    finally:
        await asyncio.wait_for(consumer.stop(), STOP_S)


async def test_range_only_consumer_cannot_join_a_streamkit_group(
    broker: BrokerProcess, admin: AIOKafkaAdminClient, unique: str
) -> None:
    """The price of offering one protocol: a plain "range" consumer is refused, clearly,
    and the streamkit member keeps its partitions."""
    topic = await make_topic(admin, unique)
    group = f"{unique}-g"
    member = streamkit_member(broker.bootstrap, group, topic, 0)
    await member.start()
    poller = asyncio.create_task(keep_polling(member))
    other = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        await wait_settled(admin, group, [member])
        with pytest.raises(InconsistentGroupProtocolError):  # start() waits for its first join
            await asyncio.wait_for(other.start(), SETTLE_S)
        assert member.partitions() == set(range(PARTITIONS))
        assert await broker_view(admin, group) == ("Stable", [set(range(PARTITIONS))])
    finally:
        poller.cancel()
        await asyncio.gather(poller, return_exceptions=True)
        assert await stop_all([member, aiokafka_member_of(other)])


def aiokafka_member_of(consumer: AIOKafkaConsumer) -> Member:
    return Member(
        start=consumer.start,
        poll=lambda: consumer.getmany(timeout_ms=50),
        partitions=lambda: {tp.partition for tp in consumer.assignment()},
        stop=consumer.stop,
    )
