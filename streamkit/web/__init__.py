"""The worker's HTTP API (aiohttp lives here and nowhere else): status, topology, metrics."""

from streamkit.web.server import WebServer

__all__ = ["WebServer"]
