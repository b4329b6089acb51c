"""The worker's HTTP API (aiohttp lives here and nowhere else): status, topology, metrics, and
the app's pages; ``View`` is Faust's ``faust.web.View`` (``streamkit.views``)."""

from streamkit.views import View
from streamkit.web.server import WebServer

__all__ = ["View", "WebServer"]
