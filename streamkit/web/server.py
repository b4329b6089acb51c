"""A running worker's read-only HTTP API.

    GET /health     200 {"status": "running"} while the worker runs and is healthy; 503 once it
                    failed or stopped, while an agent backs off after failures, or while an
                    input partition is stalled (its topic is unknown to the log), or while it
                    has no log ({"status": "waiting", "waiting": why}: the owner of the data
                    directory it joined went away and nobody serves it yet, or no broker of
                    its Kafka cluster answers), or while exactly-once tasks wait to be opened
                    again ({"reopening": {partition: why}})
    GET /status     app, broker, assigned partitions, counters, committed positions, lag, late
                    records per windowed table (or join) and reason
    GET /topology   agents with their input, repartition and sink topics
    GET /metrics    the same counters in Prometheus' text format
    GET /tables     the app's tables: partitions held here, ready or restoring, keys
    GET /tables/{name}/{key}          {"key": ..., "value": ...}; 404 JSON when absent; a key
                    of a partition another worker owns is answered by asking that worker
    GET /tables/{name}?prefix=&limit= a JSON list of {"key", "value"} held here

The app's own pages (``@app.page(path)``, ``streamkit.app.views``) are served beside these, with
the methods their views define; a page whose view is wrapped in ``@app.table_route`` or
``@app.topic_route`` runs on the worker that holds the key, the request being forwarded
(once, with the same method, path and body) when another worker owns it.

Binds 127.0.0.1 unless told otherwise; the API's own endpoints answer GET only, and request
bodies (for pages) are limited to 16 KiB.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
from aiohttp import web

from streamkit._core.errors import ConfigError
from streamkit._core.partitioner import partition_for_key
from streamkit._core.types import TopicPartition
from streamkit.app.views import Response as ViewResponse
from streamkit.app.views import View
from streamkit.runtime.worker import Worker
from streamkit.tables import query
from streamkit.tables.errors import TableError
from streamkit.tables.table import Table
from streamkit.topics.topic import Topic
from streamkit.windows.wtable import late_counts, late_rates

logger = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 16 * 1024
ROUTED_HEADER = "X-Streamkit-Routed-By"
READING_HEADER = "X-Streamkit-Key-Reading"  # which of a routed key's readings (query.parse_keys) to look up
ROUTE_TIMEOUT_S = 5.0


class WebServer:
    def __init__(self, worker: Worker, *, host: str = "127.0.0.1", port: int = 6066) -> None:
        self.worker = worker
        self.host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    @property
    def port(self) -> int:
        if self._site is None:
            raise RuntimeError("the web server is not started")
        server = self._site._server
        sockets = getattr(server, "sockets", None) or []
        return int(sockets[0].getsockname()[1]) if sockets else self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        if self._runner is not None:
            return
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_get("/", self._index)
        app.router.add_get("/health", self._health)
        app.router.add_get("/status", self._status)
        app.router.add_get("/topology", self._topology)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/tables", self._tables)
        app.router.add_get("/tables/{name}", self._table_scan)
        app.router.add_get("/tables/{name}/{key}", self._table_get)
        builtin = {r.canonical for r in app.router.resources()}
        for page in self.worker.app.pages:
            if page.view_path in builtin:
                raise ConfigError(f"page {page.view_name!r}: {page.view_path} is an endpoint of the worker's HTTP API")
            app.router.add_route("*", page.view_path, self._page_handler(page(self.worker.app, self)))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner, self._site = runner, site

    async def aclose(self) -> None:
        runner, self._runner, self._site = self._runner, None, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> WebServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- handlers ---------------------------------------------------------------------------

    @staticmethod
    def _json(data: Any, status: int = 200) -> web.Response:
        return web.Response(text=json.dumps(data, indent=2) + "\n", status=status, content_type="application/json")

    async def _index(self, request: web.Request) -> web.Response:
        return self._json(
            {
                "endpoints": ["/health", "/status", "/topology", "/metrics", "/tables"],
                "pages": [page.view_path for page in self.worker.app.pages],
            }
        )

    # -- the app's pages (``@app.page``) --------------------------------------------------------

    def _page_handler(self, view: View) -> Any:
        async def handle(request: web.Request) -> web.Response:
            try:
                answer = await view.dispatch(request)
            except Exception as exc:
                logger.exception("page %s failed", view.view_name)
                return self._json({"error": f"{type(exc).__name__}: {exc}"}, 500)
            return web.Response(
                body=answer.body, status=answer.status, reason=answer.reason,
                headers={**answer.headers, "Content-Type": answer.content_type},
            )

        return handle

    async def route_table(self, table: Table, key_text: str, request: web.Request) -> ViewResponse | None:
        """For ``@app.table_route``: None when the key is to be answered here (held here, its
        partition held here, or a request already routed once), else the owner's answer."""
        if ROUTED_HEADER in request.headers:
            return None
        try:
            query.lookup(table, key_text)
            return None
        except query.NotHeldHere as exc:
            return await self._ask_owner(exc.partition, request)
        except TableError:
            return None  # absent from a partition held here, or a key the view may refuse

    async def route_topic(self, topic: Topic, key_text: str, request: web.Request) -> ViewResponse | None:
        """For ``@app.topic_route``: None when this worker consumes the key's partition of
        ``topic`` (or nobody is known to), else the answer of the worker that does."""
        if ROUTED_HEADER in request.headers:
            return None
        count = self.worker.partition_count_of(topic)
        if count is None:
            return None
        key_type = topic.key_type
        key: Any = key_text
        try:
            if key_type is bytes:
                key = key_text.encode()
            elif key_type in (int, float):
                key = key_type(key_text)
        except ValueError:
            return ViewResponse(
                json.dumps({"error": f"{key_text!r} is not a key of topic {topic.name!r}"}).encode(), 400
            )
        raw = topic.key_serde.dumps(key)
        if raw is None:
            return None
        partition = partition_for_key(raw, count)
        if TopicPartition(topic.name, partition) in self.worker.assignment():
            return None
        return await self._ask_owner(partition, request)

    async def _ask_owner(self, partition: int, request: web.Request) -> ViewResponse | None:
        """The answer of the worker that owns ``partition`` to the same request, asked once:
        the forwarded request carries a header so it is never forwarded again. None when the
        owner is this worker or unknown."""
        owner = self.worker.owner_url(partition)
        if owner is None or owner.rstrip("/") == self.url:
            return None
        timeout = aiohttp.ClientTimeout(total=ROUTE_TIMEOUT_S)
        body = await request.read()
        try:
            async with aiohttp.ClientSession(timeout=timeout) as http, http.request(
                request.method, owner.rstrip("/") + request.rel_url.path_qs,
                data=body or None, headers={ROUTED_HEADER: self.url},
            ) as response:
                return ViewResponse(await response.read(), response.status, response.content_type)
        except (aiohttp.ClientError, TimeoutError) as exc:
            detail = f"the owner of partition {partition} at {owner} did not answer: {exc}"
            return ViewResponse(json.dumps({"error": detail}).encode(), 503)

    async def _health(self, request: web.Request) -> web.Response:
        w = self.worker
        failing = w.failing_agents()
        stalled = w.stalled()
        reopening = w.reopening()
        body: dict[str, Any] = {"status": w.state}
        if w.state == "running" and (failing or stalled or reopening):
            body["status"] = "degraded"
        if failing:
            body["failing_agents"] = failing
        if stalled:
            body["stalled"] = {str(tp): why for tp, why in sorted(stalled.items())}
        if reopening:
            body["reopening"] = {str(p): why for p, why in sorted(reopening.items())}
        waiting = w.log_unavailable
        if waiting is not None:
            body["waiting"] = waiting
        return self._json(body, 200 if body["status"] == "running" else 503)

    async def _status(self, request: web.Request) -> web.Response:
        w = self.worker
        return self._json(
            {
                "app": w.app.id,
                "broker": w.client.url,
                "state": w.state,
                "assignment": sorted(str(tp) for tp in w.assignment()),
                "records_in": w.stats.records_in,
                "dead_lettered": w.stats.dead_lettered,
                "commits": w.stats.commits,
                **w.guarantee_status(),
                "committed": {str(tp): offset for tp, offset in sorted(w.committed.items())},
                "lag": {str(tp): n for tp, n in sorted(w.lag().items())},
                "alignment": w.alignment(),
                "failing_agents": w.failing_agents(),
                "stalled": {str(tp): why for tp, why in sorted(w.stalled().items())},
                "partition_mismatches": w.partition_mismatches,
                "replication_mismatches": w.replication_mismatches,
                "tables": w.state_manager.describe(),
                "late_records": late_counts(w.app),
                "late_rate": late_rates(w.app),
            }
        )

    async def _tables(self, request: web.Request) -> web.Response:
        return self._json({"app": self.worker.app.id, "tables": self.worker.state_manager.describe()})

    async def _table_get(self, request: web.Request) -> web.Response:
        """A key's readings (``query.parse_keys``) in order: one found here answers; one whose
        partition another worker owns is asked of that worker (for that reading only), and its
        404 moves on to the next reading, so every worker answers as the key's owners would."""
        try:
            table = query.find_table(self.worker.app.tables, request.match_info["name"])
            text = request.match_info["key"]
            readings = slice(None)
            if ROUTED_HEADER in request.headers and READING_HEADER in request.headers:
                try:
                    one = int(request.headers[READING_HEADER])
                except ValueError:
                    raise query.QueryError(400, f"bad {READING_HEADER}: {request.headers[READING_HEADER]!r}") from None
                readings = slice(one, one + 1)
            while True:
                try:
                    return self._json(query.lookup(table, text, _ms(request, "from"), _ms(request, "to"), readings=readings))
                except query.NotHeldHere as exc:
                    if ROUTED_HEADER in request.headers:
                        raise
                    routed = await self._route(exc.partition, exc.reading, request)
                    if routed is None:
                        raise
                    if routed.status != 404 and not (table.is_windowed and _no_windows(routed)):
                        return routed
                    readings = slice(exc.reading + 1, None)  # not a key under that reading: the next
        except query.QueryError as exc:
            return self._json({"error": exc.message}, exc.status)

    async def _route(self, partition: int, reading: int, request: web.Request) -> web.Response | None:
        """Ask the worker that owns ``partition`` (known from the group's assignment) about the
        key's reading ``reading``, once: the routed request carries a header so it is never
        routed again."""
        owner = self.worker.owner_url(partition)
        if owner is None or owner.rstrip("/") == self.url:
            return None
        timeout = aiohttp.ClientTimeout(total=ROUTE_TIMEOUT_S)
        headers = {ROUTED_HEADER: self.url, READING_HEADER: str(reading)}
        try:
            async with aiohttp.ClientSession(timeout=timeout) as http, http.get(
                owner.rstrip("/") + request.rel_url.path_qs, headers=headers
            ) as response:
                body = await response.read()
                return web.Response(body=body, status=response.status, content_type="application/json")
        except (aiohttp.ClientError, TimeoutError) as exc:
            return self._json({"error": f"the owner of partition {partition} at {owner} did not answer: {exc}"}, 503)

    async def _table_scan(self, request: web.Request) -> web.Response:
        try:
            table = query.find_table(self.worker.app.tables, request.match_info["name"])
            try:
                limit = int(request.query.get("limit", "100"))
            except ValueError:
                raise query.QueryError(400, f"limit must be an integer, not {request.query['limit']!r}") from None
            return self._json(query.scan(table, request.query.get("prefix", ""), limit))
        except query.QueryError as exc:
            return self._json({"error": exc.message}, exc.status)

    async def _topology(self, request: web.Request) -> web.Response:
        w = self.worker
        agents = []
        for agent in w.app.agents.values():
            inputs = w.agent_inputs(agent)
            agents.append(
                {
                    "name": agent.name,
                    "topics": [t.name for t in agent.topics],
                    "through": [name for name in inputs if name not in {t.name for t in agent.topics}],
                    "sinks": [getattr(s, "name", getattr(s, "__name__", repr(s))) for s in agent.sinks],
                    "concurrency": agent.concurrency,
                }
            )
        return self._json({"app": w.app.id, "agents": agents, "topics": sorted(w.app.topics)})

    async def _metrics(self, request: web.Request) -> web.Response:
        w = self.worker
        app = w.app.id
        lines = [
            "# HELP streamkit_records_in_total Records fetched for agents.",
            "# TYPE streamkit_records_in_total counter",
            f'streamkit_records_in_total{{app="{app}"}} {w.stats.records_in}',
            "# HELP streamkit_dead_letters_total Records sent to the dead-letter topic.",
            "# TYPE streamkit_dead_letters_total counter",
            f'streamkit_dead_letters_total{{app="{app}"}} {w.stats.dead_lettered}',
            "# HELP streamkit_commits_total Offset commits.",
            "# TYPE streamkit_commits_total counter",
            f'streamkit_commits_total{{app="{app}"}} {w.stats.commits}',
            "# HELP streamkit_lag Records not yet processed per input partition.",
            "# TYPE streamkit_lag gauge",
        ]
        for tp, n in sorted(w.lag().items()):
            lines.append(f'streamkit_lag{{app="{app}",topic="{tp.topic}",partition="{tp.partition}"}} {n}')
        lines += [
            "# HELP streamkit_late_records_total Late records by reason; window-closed: sent to <app>-late "
            "(window-closed-partly: hopping, some windows missed it).",
            "# TYPE streamkit_late_records_total counter",
        ]
        for table, reasons in late_counts(w.app).items():
            for reason, n in sorted({"window-closed": 0, **reasons}.items()):
                lines.append(f'streamkit_late_records_total{{app="{app}",table="{table}",reason="{reason}"}} {n}')
        lines += [
            "# HELP streamkit_late_fraction Late fraction of the last interval of records of a windowed table or join.",
            "# TYPE streamkit_late_fraction gauge",
        ]
        for table, rate in late_rates(w.app).items():
            lines.append(f'streamkit_late_fraction{{app="{app}",table="{table}"}} {rate["interval_fraction"]:g}')
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


def _no_windows(response: web.Response) -> bool:
    """A windowed table's owner answered 200 with no windows: the key has none under the
    reading asked (a windowed lookup answers so where another table answers 404)."""
    if response.status != 200 or not isinstance(response.body, bytes):
        return False
    try:
        return bool(json.loads(response.body).get("windows") == [])
    except (ValueError, AttributeError):
        return False


def _ms(request: web.Request, name: str) -> int | None:
    """An integer-milliseconds query parameter (``?from=``, ``?to=``), or a 400 error."""
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise query.QueryError(400, f"{name} must be integer milliseconds, not {raw!r}") from None
