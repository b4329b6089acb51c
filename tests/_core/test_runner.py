"""run_to_end: a coroutine's result back from a long-lived asyncio.Runner, never formatted."""

from __future__ import annotations

import asyncio

import pytest

from streamkit._core.runner import run_to_end


class Big:
    """A result whose repr must not be taken (a fetch's megabytes)."""

    reprs = 0

    def __repr__(self) -> str:
        Big.reprs += 1
        return "Big"


async def _make() -> Big:
    await asyncio.sleep(0)
    return Big()


async def _fail() -> None:
    raise KeyError("gone")


def test_the_result_comes_back_without_its_repr_taken() -> None:
    Big.reprs = 0
    with asyncio.Runner() as runner:  # this test runs in the main thread, as the CLI and Spark do
        results = [run_to_end(runner, _make()) for _ in range(3)]
    assert all(isinstance(r, Big) for r in results)
    assert Big.reprs == 0


def test_an_error_comes_through() -> None:
    with asyncio.Runner() as runner, pytest.raises(KeyError, match="gone"):
        run_to_end(runner, _fail())
