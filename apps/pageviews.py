"""A stateless pipeline: clean raw page views into per-user visits.

    pageviews (keyed by session) --filter bots--> group_by(user) --map--> visits (keyed by user)

Run it:

    streamkit worker -A apps.pageviews:app                 # embedded log in .streamkit/
    streamkit worker -A apps.pageviews:app --broker kafka://127.0.0.1:9092
    python -m apps.pageviews --records 50000               # the demo: generate, process, report
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from urllib.parse import urlparse

import streamkit as sk
from streamkit.runtime import Worker


class PageView(sk.Record):
    session: str
    user: str
    url: str
    duration_ms: int
    user_agent: str


class Visit(sk.Record):
    user: str
    path: str
    seconds: float


app = sk.App("pageviews", broker=os.environ.get("STREAMKIT_BROKER", "file://.streamkit"))
pageviews = app.topic("pageviews", key_type=str, value_type=PageView, partitions=4)
visits = app.topic("visits", key_type=str, value_type=Visit, partitions=4)


def is_human(view: PageView) -> bool:
    return "bot" not in view.user_agent.lower()


@app.agent(pageviews, sink=[visits])
async def clean(stream: sk.Stream):  # type: ignore[no-untyped-def]
    """Drop bots, re-key by user, keep the path and the time spent."""
    async for view in stream.filter(is_human).group_by(PageView.user):
        yield Visit(user=view.user, path=urlparse(view.url).path, seconds=view.duration_ms / 1000)


AGENTS = ["Mozilla/5.0 (X11; Linux x86_64)", "Mozilla/5.0 (Macintosh)", "Googlebot/2.1", "curl/8.5"]
PATHS = ["/", "/cart", "/checkout", "/product/42", "/product/7", "/search?q=socks"]


def generate(count: int, seed: int = 7) -> list[tuple[str, PageView]]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        user = f"user-{rng.randrange(100)}"
        session = f"{user}-s{rng.randrange(5)}"
        view = PageView(
            session=session,
            user=user,
            url=f"https://shop.example{rng.choice(PATHS)}",
            duration_ms=rng.randrange(100, 60_000),
            user_agent=rng.choice(AGENTS),
        )
        out.append((f"{session}-{i}", view))
    return out


async def demo(records: int, data_dir: str) -> None:
    app.broker = f"file://{data_dir}"
    async with Worker(app) as worker:
        print(f"app {app.id!r} on {worker.client.url}: {records} page views -> agent 'clean' -> 'visits'")
        started = time.perf_counter()
        for key, view in generate(records):
            await pageviews.send(key=key, value=view)
        while not await worker.settle():
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        committed = await worker.commit()
        print(f"processed {worker.stats.records_in} records (page views + repartitioned) in {elapsed:.2f} s")
        print(f"committed positions: {len(committed)} partitions; lag: {sum(worker.lag().values())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--data-dir", default=None, help="embedded log directory (default: a new temp dir)")
    args = parser.parse_args()
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="streamkit-demo-")
    asyncio.run(demo(args.records, data_dir))
    if args.data_dir is None:
        print(f"the log is in {data_dir}")


if __name__ == "__main__":
    main()
