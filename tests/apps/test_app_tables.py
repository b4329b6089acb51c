"""The table examples, tested as users test theirs: word count (agents and declared) and
enrichment (a stream-table join)."""

from __future__ import annotations

import collections

from apps import enrichment, wordcount, wordcount_dsl
from streamkit.testing import AppDriver

TEXT = ["To be or not to be", "that is the question", "to be"]


async def test_both_word_counts_give_the_same_answer() -> None:
    expected_raw = collections.Counter(w for line in TEXT for w in line.split())
    async with AppDriver(wordcount.app) as driver:
        for line in TEXT:
            await driver.send(wordcount.lines, line)
        await driver.process()
        assert dict(wordcount.word_counts.items()) == dict(expected_raw)
    expected = collections.Counter(w.lower() for line in TEXT for w in line.split())
    async with AppDriver(wordcount_dsl.app) as driver:
        for line in TEXT:
            await driver.send(wordcount_dsl.lines, line)
        await driver.process()
        assert dict(wordcount_dsl.word_counts.items()) == dict(expected)


async def test_orders_are_enriched_with_the_current_customer() -> None:
    async with AppDriver(enrichment.app) as driver:
        await driver.send(enrichment.customers, enrichment.Customer("Ann", "gold"), key="c1")
        await driver.process()
        await driver.send(enrichment.orders, enrichment.Order("o1", 30.0), key="c1")
        await driver.send(enrichment.orders, enrichment.Order("o2", 5.0), key="c9")
        await driver.process()
        await driver.send(enrichment.customers, enrichment.Customer("Ann", "platinum"), key="c1")
        await driver.process()
        await driver.send(enrichment.orders, enrichment.Order("o3", 99.0), key="c1")
        await driver.process()
        out = {e.value.order_id: e.value for e in await driver.read(enrichment.enriched)}
    assert (out["o1"].customer, out["o1"].tier) == ("Ann", "gold")
    assert (out["o2"].customer, out["o2"].tier) == (None, None)
    assert out["o3"].tier == "platinum"
