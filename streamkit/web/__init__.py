"""The worker's HTTP API (aiohttp lives here and nowhere else): status, topology, metrics, and
the app's pages; ``View`` is Faust's ``faust.web.View`` (``streamkit.app.views``).

Owns: ``server`` (the HTTP API over a running worker).
May import: ``runtime`` and every layer below it; never ``cli``.
"""

from streamkit.app.views import View
from streamkit.web.server import WebServer

__all__ = ["View", "WebServer"]
