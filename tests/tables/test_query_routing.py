"""Two worker processes on each backend (``log_url``) sharing an untyped table (keys JSON, as
Faust's tabletest declares ``counts``): the path ``GET /tables/totals/7`` reads ``7`` as JSON
first (the integer 7), then as the string "7", and each reading is routed to the worker holding the
partition *its* bytes hash to (``7`` and ``"7"`` hash apart), so either worker gives the same
answer: the string key when only it exists, the integer when both do."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from streamkit._core.partitioner import partition_for_key
from tests.tables.counting_log import produce
from tests.tables.test_table_failover import WorkerProc, _get, _until
from tests.tables.untyped_app import PARTITIONS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _home(key: object) -> int:
    return partition_for_key(json.dumps(key).encode(), PARTITIONS)


def _split(first: set[int], second: set[int]) -> dict[str, str]:
    """Digit texts whose two readings' homes lie on different workers, one per case."""
    cases: dict[str, str] = {}
    for n in range(1000):
        text = str(n)
        json_home, text_home = _home(n), _home(text)
        if json_home in first and text_home in second:
            case = "json-on-first"
        elif json_home in second and text_home in first:
            case = "json-on-second"
        else:
            continue
        for name in (f"{case}/string", f"{case}/both", f"{case}/none"):
            if name not in cases and text not in cases.values():
                cases[name] = text
                break
    assert len(cases) == 6, cases
    return cases


async def _produce(url: str, app_id: str, pairs: list[tuple[object, int]]) -> None:
    """Keys as the app's JSON key serializer writes them."""
    await produce(url, pairs, lambda key: json.dumps(key).encode(), PARTITIONS, app_id)


async def test_each_reading_of_an_untyped_key_is_routed_to_the_worker_holding_it(
    log_url: str, unique: str, tmp_path: Path
) -> None:
    url = log_url
    env = {**os.environ, "STREAMKIT_BROKER": url, "UNTYPED_ID": unique, "PYTHONPATH": str(ROOT)}
    await _produce(url, unique, [])  # the input topic exists before the workers join
    first = WorkerProc(tmp_path, "a", env, app="tests.tables.untyped_app:app")
    second = WorkerProc(tmp_path, "b", env, app="tests.tables.untyped_app:app")
    try:
        await first.started()
        await second.started()
        await _until(lambda: first.ready() and second.ready()
                     and first.ready() | second.ready() == set(range(PARTITIONS))
                     and not first.ready() & second.ready(), "both workers to share the partitions")
        cases = _split(first.ready(), second.ready())
        pairs: list[tuple[object, int]] = []
        for name, text in cases.items():
            if name.endswith("/string") or name.endswith("/both"):
                pairs.append((text, 100 + int(text)))  # the string key, as str(partition) is
            if name.endswith("/both"):
                pairs.append((int(text), 1))
        await _produce(url, unique, pairs)
        expected: dict[str, tuple[int, object]] = {}
        for name, text in cases.items():
            if name.endswith("/string"):
                expected[text] = (200, {"key": text, "value": 100 + int(text)})
            elif name.endswith("/both"):
                expected[text] = (200, {"key": int(text), "value": 1})  # JSON first
            else:
                expected[text] = (404, {"error": f"key {text!r} is not in table 'totals'"})

        written = sorted((json.dumps(key), value) for key, value in pairs)

        def scanned() -> bool:  # every record added, seen from both workers' scans together
            rows = [row for w in (first, second) for row in _get(f"{w.url}/tables/totals")[1]]
            return sorted((json.dumps(r["key"]), r["value"]) for r in rows) == written

        await _until(scanned, "the workers to add every record")
        for worker in (first, second):
            got = {}
            for text in expected:
                status, body = await asyncio.to_thread(_get, f"{worker.url}/tables/totals/{text}")
                got[text] = (status, {k: v for k, v in body.items() if k != "partition"})
            assert got == expected, (worker.url, cases)
    finally:
        second.stop(signal.SIGTERM)
        first.stop(signal.SIGTERM)
