"""Tables against a reference dict, for random keyed input: live, after a clean restart, and
after a restore from the changelog alone (state directory deleted)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamkit.testing import AppDriver
from tests.tables import counting_app as capp

pairs = st.lists(st.tuples(st.sampled_from([f"k{i}" for i in range(12)]), st.integers(-1, 5)), max_size=40)


async def _feed(driver: AppDriver, batch: list[tuple[str, int]]) -> None:
    for key, value in batch:
        await driver.send(capp.events, value, key=key)
    await driver.process()


def _restored(driver: AppDriver) -> int:
    return sum(p.records for p in driver.worker.state_manager.restores.values())


async def _scenario(first: list[tuple[str, int]], second: list[tuple[str, int]], wipe: bool, store: str) -> None:
    capp.counts.store_kind = store
    tmp = tempfile.mkdtemp(prefix="tables-prop-")
    data_dir, state_dir = f"{tmp}/log", f"{tmp}/state"
    try:
        async with AppDriver(capp.app, data_dir=data_dir, state_dir=state_dir) as driver:
            await _feed(driver, first)
            assert dict(capp.counts.items()) == capp.reference(first)
            changelog_records = len(await driver.read(capp.counts.changelog_topic))
        if wipe:
            shutil.rmtree(state_dir, ignore_errors=True)
        async with AppDriver(capp.app, data_dir=data_dir, state_dir=state_dir) as driver:
            assert dict(capp.counts.items()) == capp.reference(first)
            if wipe or store == "memory":
                assert _restored(driver) == changelog_records  # the whole changelog, once
            else:
                assert _restored(driver) == 0  # the state was current: nothing replayed
            await _feed(driver, second)
            assert dict(capp.counts.items()) == capp.reference(first + second)
    finally:
        capp.counts.store_kind = "rocksdb"
        shutil.rmtree(tmp, ignore_errors=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=pairs, second=pairs, wipe=st.booleans(), store=st.sampled_from(["rocksdb", "memory"]))
def test_table_equals_the_reference_across_restarts(
    first: list[tuple[str, int]], second: list[tuple[str, int]], wipe: bool, store: str
) -> None:
    asyncio.run(_scenario(first, second, wipe, store))
