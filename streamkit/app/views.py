"""Web views an app declares (``@app.page``, Faust's ``faust.web.View``), and the routing of a
view to the worker that owns a table key's or a topic key's partition
(``@app.table_route``/``@app.topic_route``).

    >>> import streamkit as faust
    >>> app = faust.App("docs-views")
    >>> @app.page("/hello/{name}/")
    ... async def hello(web, request, name):
    ...     return web.json({"hello": name})
    >>> [(page.view_path, page.view_name) for page in app.pages]
    [('/hello/{name}/', 'hello')]

Declaring only: a worker started with ``--web-port`` serves the views beside its own HTTP API
(``streamkit.web``). A view is a class with one async method per HTTP method it answers
(``get``, ``post``, ``put``, ``patch``, ``delete``), called with the request and the path's
``{parameters}`` as keyword arguments; a function view is its ``get``, and its first argument
(Faust names it ``web``) is the view itself, with ``json()``, ``text()``, ``html()``,
``bytes()``, ``error()`` and ``notfound()`` to build the answer. The request is the HTTP
server's (aiohttp's): ``request.match_info``, ``request.query``, ``await request.json()``.
A method the view does not define answers 405; raising ``View.NotFound``/``BadRequest``/...
answers that status with ``{"error": detail}``.

This module knows nothing of the HTTP server: a view builds a ``Response`` (bytes, status,
content type, headers) that the server sends, and routing asks the server through the
``PageHost`` the view is given.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import msgspec

from streamkit._core.errors import ConfigError, StreamkitError

if TYPE_CHECKING:
    from streamkit.tables.table import Table
    from streamkit.topics.topic import Topic

_Bytes = bytes  # View has a method named bytes, as Faust's has
HTTP_METHODS = ("get", "post", "put", "patch", "delete")


@dataclass
class Response:
    """What a view answers: sent as it is by the worker's HTTP server."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    reason: str | None = None


class WebError(StreamkitError):
    """Raised inside a view: answered with ``status`` and ``{"error": detail}``."""

    status = 500

    def __init__(self, detail: str | None = None, **extra: Any) -> None:
        self.detail = detail or type(self).__name__
        self.extra = extra
        super().__init__(self.detail)


class BadRequest(WebError):
    status = 400


class NotAuthenticated(WebError):
    status = 401


class PermissionDenied(WebError):
    status = 403


class NotFound(WebError):
    status = 404


class MethodNotAllowed(WebError):
    status = 405


class PageHost(Protocol):
    """What a view asks of the server that runs it (``streamkit.web``)."""

    async def route_table(self, table: Table, key_text: str, request: Any) -> Response | None:
        """The answer of the worker holding ``key_text`` of ``table``, or None to answer here."""
        ...

    async def route_topic(self, topic: Topic, key_text: str, request: Any) -> Response | None:
        """The answer of the worker owning the partition of ``key_text`` in ``topic``, or None
        to answer here."""
        ...


def _to_json(value: Any) -> bytes:
    try:
        return msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError) as exc:
        raise TypeError(f"a web view's JSON answer must be JSON-serializable: {exc}") from exc


class View:
    """A web view (Faust's ``faust.web.View``): subclass it and define ``get``/``post``/...;
    declare it with ``@app.page(path)``."""

    view_name: ClassVar[str] = ""
    view_path: ClassVar[str] = ""

    BadRequest = BadRequest
    NotAuthenticated = NotAuthenticated
    PermissionDenied = PermissionDenied
    NotFound = NotFound
    MethodNotAllowed = MethodNotAllowed

    def __init__(self, app: Any, web: PageHost) -> None:
        self.app = app
        self.web = web

    @classmethod
    def from_handler(cls, fun: Callable[..., Awaitable[Any]]) -> type[View]:
        """A view class whose ``get`` is ``fun(view, request, **path_parameters)``."""
        if not callable(fun):
            raise ConfigError(f"a view handler must be callable, not {fun!r}")
        return type(
            getattr(fun, "__name__", "view"),
            (cls,),
            {"get": fun, "__doc__": fun.__doc__, "__module__": getattr(fun, "__module__", __name__)},
        )

    def methods(self) -> set[str]:
        """The HTTP methods this view answers (HEAD with GET)."""
        answered = {m.upper() for m in HTTP_METHODS if getattr(type(self), m) is not getattr(View, m)}
        return answered | ({"HEAD"} if "GET" in answered else set())

    async def dispatch(self, request: Any) -> Response:
        """Call the method's handler with the path's parameters; errors it raises become
        their status."""
        method = str(request.method).lower()
        if method == "head":
            method = "get"
        handler = getattr(self, method, None) if method in HTTP_METHODS else None
        try:
            if handler is None:
                raise MethodNotAllowed(f"Method {method.upper()} not allowed.")
            result = await handler(request, **dict(request.match_info))
        except WebError as exc:
            return self.error(exc.status, exc.detail, **exc.extra)
        if isinstance(result, Response):
            return result
        raise TypeError(
            f"view {self.view_name or type(self).__name__!r} must answer with web.json(...), "
            f"web.text(...) and kin, not {type(result).__name__}"
        )

    async def get(self, request: Any, **kwargs: Any) -> Any:
        raise MethodNotAllowed("Method GET not allowed.")

    async def post(self, request: Any, **kwargs: Any) -> Any:
        raise MethodNotAllowed("Method POST not allowed.")

    async def put(self, request: Any, **kwargs: Any) -> Any:
        raise MethodNotAllowed("Method PUT not allowed.")

    async def patch(self, request: Any, **kwargs: Any) -> Any:
        raise MethodNotAllowed("Method PATCH not allowed.")

    async def delete(self, request: Any, **kwargs: Any) -> Any:
        raise MethodNotAllowed("Method DELETE not allowed.")

    # -- answers -----------------------------------------------------------------------------

    def json(
        self,
        value: Any,
        *,
        content_type: str | None = None,
        status: int = 200,
        reason: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """Answer ``value`` as JSON (records, datetimes, decimals and UUIDs included)."""
        return Response(_to_json(value), status, content_type or "application/json", dict(headers or {}), reason)

    def text(
        self,
        value: str,
        *,
        content_type: str | None = None,
        status: int = 200,
        reason: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        return Response(value.encode(), status, content_type or "text/plain", dict(headers or {}), reason)

    def html(
        self,
        value: str,
        *,
        content_type: str | None = None,
        status: int = 200,
        reason: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        return Response(value.encode(), status, content_type or "text/html", dict(headers or {}), reason)

    def bytes(
        self,
        value: _Bytes,
        *,
        content_type: str | None = None,
        status: int = 200,
        reason: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        return Response(value, status, content_type or "application/octet-stream", dict(headers or {}), reason)

    def error(self, status: int, reason: str, headers: Mapping[str, str] | None = None, **kwargs: Any) -> Response:
        """Answer ``{"error": reason, **kwargs}`` with ``status``."""
        return self.json({"error": reason, **kwargs}, status=status, headers=headers)

    def notfound(self, reason: str = "Not Found", **kwargs: Any) -> Response:
        return self.error(404, reason, **kwargs)


ViewHandler = Callable[..., Awaitable[Any]]


def route_decorator(
    kind: str,
    target: Any,
    *,
    query_param: str | None,
    match_info: str | None,
    exact_key: str | None,
) -> Callable[[ViewHandler], ViewHandler]:
    """What ``app.table_route``/``app.topic_route`` return: wrap a view method so that it runs
    on the worker that owns the key, found in the path (``match_info``), the query string
    (``query_param``) or fixed (``exact_key``)."""
    if query_param is None and match_info is None and exact_key is None:
        raise ConfigError(f"@app.{kind}_route needs one of match_info=, query_param= or exact_key=")

    def decorate(fun: ViewHandler) -> ViewHandler:
        @functools.wraps(fun)
        async def routed(view: View, request: Any, *args: Any, **kwargs: Any) -> Any:
            if exact_key is not None:
                key = exact_key
            elif match_info is not None:
                key = request.match_info.get(match_info)
                if key is None:
                    raise BadRequest(f"the path has no {{{match_info}}} parameter")
            else:
                assert query_param is not None
                key = request.query.get(query_param)
                if key is None:
                    raise BadRequest(f"missing query parameter {query_param!r}")
            host = view.web
            answer = await (host.route_table(target, key, request) if kind == "table" else host.route_topic(target, key, request))
            if answer is not None:
                return answer
            return await fun(view, request, *args, **kwargs)

        return routed

    return decorate
