"""The running app's topology: what each agent reads and writes, and the topics behind it.

``probe`` runs each agent's set-up code once against a probe source (``probe.py``) to learn
the ``group_by``/``through`` hops it opens; ``create_topics`` then creates every declared
topic and each hop's topic (a repartition topic gets the declared partition count of the
agent's first topic, else that topic's actual count) and keeps the partition count of each.

Partition counts: a topic that already existed keeps its count, which may differ from the
declaration (a producer that came first auto-created it). That is said once at start-up and
kept in ``partition_mismatches``: a warning in general, an error for a topic an agent reads
co-partitioned with others (its hop topics, several merged topics, the tables' changelogs),
where partition p of each must hold the same keys; Kafka Streams refuses to start then.
The tables' changelogs are created by the state manager (``state.py``), with the most
partitions of the agents' inputs unless a table declares its own.
"""

from __future__ import annotations

import logging

from streamkit._core.errors import ConfigError
from streamkit.agents.agent import Agent
from streamkit.app.application import App
from streamkit.dsl.builders import copartitioning_errors
from streamkit.runtime.probe import Hop, discover
from streamkit.runtime.sender import RuntimeSender
from streamkit.runtime.state import StateManager
from streamkit.topics.topic import Topic
from streamkit.transport.base import LogClient

logger = logging.getLogger(__name__)


class Topology:
    def __init__(self, app: App, client: LogClient, state: StateManager) -> None:
        self.app = app
        self.client = client
        self.state = state
        self.hops: dict[str, list[Hop]] = {}
        # Agents whose sinks are all topics: their yielded values take the sender's fast path.
        self.topic_sinks: dict[str, tuple[Topic, ...]] = {}
        self._hop_topics: dict[tuple[str, str], Topic] = {}
        self._counts: dict[str, int] = {}
        # Topics found with another partition count than declared: name -> what was said.
        self.partition_mismatches: dict[str, str] = {}
        self.sender: RuntimeSender | None = None  # told every partition count learnt

    async def probe(self) -> None:
        for agent in self.app.agents.values():
            self.hops[agent.name] = await discover(agent)
            if all(isinstance(sink, Topic) for sink in agent.sinks):
                self.topic_sinks[agent.name] = tuple(sink for sink in agent.sinks if isinstance(sink, Topic))

    async def create_topics(self) -> None:
        default = self.app.topic_partitions
        wanted: dict[str, int] = {}
        changelogs = self.state.changelog_names
        # A pipeline's repartition topic declared without a partition count takes its
        # source's (Kafka Streams' rule; the backfill places records the same way).
        likes = {rep.topic.name: rep.like for plan in self.app.plans for rep in plan.repartitions}
        later = []
        for topic in list(self.app.topics.values()):
            if topic.name in changelogs:
                continue
            if topic.partitions is None and topic.name in likes:
                later.append(topic)
                continue
            await self.ensure(topic, topic.partitions or default)
            if topic.partitions is not None:
                wanted[topic.name] = topic.partitions
        for topic in later:
            await self.ensure(topic, self._counts.get(likes[topic.name].name) or default)
        # Tables' changelogs take the partitions of the agents' inputs (co-partitioning), so
        # they come after the inputs and before the hops of agents that read them.
        inputs = [t.name for a in self.app.agents.values() for t in a.topics if t.name in self._counts]
        await self.state.create_changelogs(self.ensure, max([default, *(self._counts[n] for n in inputs)]))
        errors = copartitioning_errors(self.app.topologies, lambda t: self._counts.get(t.name))
        if errors:  # a declared join over inputs partitioned differently: refuse to start
            raise ConfigError("; ".join(errors))
        await self.state.open_global_tables()
        copartitioned: dict[str, Agent] = {}
        for agent in self.app.agents.values():
            hops = self.hops[agent.name]
            if agent.in_channel is not None:  # in memory: no topics, no partitions
                if hops:
                    raise ConfigError(f"agent {agent.name} reads a channel: it cannot group_by or go through a topic")
                continue
            source_count = self._counts[agent.topics[0].name]
            for hop in hops:
                target = self.hop_topic(agent, hop.topic, hop.name)
                wanted[target.name] = target.partitions or source_count
                await self.ensure(target, wanted[target.name])
            # Partition p of each input (and of every table, when there are tables) is read
            # by the same task: they must be partitioned alike.
            if hops or len(agent.topics) > 1 or self.app.tables:
                for name in self.agent_inputs(agent):
                    copartitioned.setdefault(name, agent)
        for name, count in sorted(wanted.items()):
            if self._counts.get(name, count) != count:
                self._partition_mismatch(name, count, self._counts[name], copartitioned.get(name))

    def _partition_mismatch(self, name: str, declared: int, actual: int, agent: Agent | None) -> None:
        text = f"topic {name!r} has {actual} partition(s) but is declared with {declared}"
        if agent is None:
            logger.warning("%s; it is used as it is (records are partitioned over %d)", text, actual)
            message = f"{text} (used as it is)"
        else:
            together = sorted(set(self.agent_inputs(agent)) - {name})
            together += [f"table {t}" for t in sorted(self.app.tables)]
            inputs = ", ".join(together)
            logger.error(
                "%s; agent %s reads it co-partitioned with %s: partition p of each must hold the "
                "same keys (recreate the topic, or declare partitions=%d)", text, agent.name, inputs, actual,
            )
            message = f"{text}; agent {agent.name} reads it co-partitioned with {inputs}"
        self.partition_mismatches[name] = message

    async def ensure(self, topic: Topic, partitions: int) -> int:
        """Create ``topic`` unless it exists; its partition count."""
        count = await self.client.ensure_topic(topic.name, partitions, topic.config)
        self._counts[topic.name] = count
        if self.sender is not None:
            self.sender.known_partitions(topic.name, count)
        return count

    async def partitions_for(self, topic: Topic) -> int:
        """The partition count of ``topic``, created on first use (a topic declared late)."""
        count = self._counts.get(topic.name)
        if count is None:
            count = await self.ensure(topic, topic.partitions or self.app.topic_partitions)
        return count

    def partition_count_of(self, topic: Topic) -> int | None:
        return self._counts.get(topic.name)

    def hop_topic(self, agent: Agent, topic: Topic | None, name: str) -> Topic:
        """The topic of one ``through``/``group_by`` hop of ``agent``."""
        if topic is not None:
            return topic
        found = self._hop_topics.get((agent.name, name))
        if found is None:
            source = agent.topics[0]
            found = self.app.topic(
                agent.repartition_topic_name(name),
                key_serializer="json",
                value_serializer=source.value_serde,
                partitions=source.partitions,
                repartition=True,
            )
            self._hop_topics[(agent.name, name)] = found
        return found

    def input_topics(self) -> list[str]:
        names: set[str] = set()
        for agent in self.app.agents.values():
            names.update(self.agent_inputs(agent))
        return sorted(names)

    def agent_inputs(self, agent: Agent) -> dict[str, Topic]:
        inputs = {t.name: t for t in agent.topics}
        for hop in self.hops.get(agent.name, []):
            target = self.hop_topic(agent, hop.topic, hop.name)
            inputs[target.name] = target
        return inputs
