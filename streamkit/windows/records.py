"""What windows write to topics, spelled once for every writer (the worker's windowed
aggregations and joins, Faust's windowed tables, the Spark backfill):

* a window on a windowed table's stream (``to_stream(emit=...)``): ``window_body``;
* a record set aside as late on ``<app>-late``: its headers, ``late_headers``.

    >>> window_body(0, 60_000, 3)
    {'window_start': 0, 'window_end': 60000, 'value': 3}
    >>> late_headers("counts", "expired", 5, 70_000)[1]
    ('streamkit.reason', b'expired')
"""

from __future__ import annotations

from typing import Any


def window_body(start_ms: int, end_ms: int, value: Any) -> dict[str, Any]:
    """The value of a window's record on a windowed table's stream (before its serializer)."""
    return {"window_start": start_ms, "window_end": end_ms, "value": value}


def late_headers(
    table: str, reason: str, ts_ms: int, stream_time_ms: int, *, side: str | None = None
) -> list[tuple[str, bytes]]:
    """The headers of a late record: which table (and join side) set it aside, why, the
    record's timestamp and the stream time it came at."""
    headers = [("streamkit.table", table.encode())]
    if side is not None:
        headers.append(("streamkit.join_side", side.encode()))
    headers += [
        ("streamkit.reason", reason.encode()),
        ("streamkit.timestamp", str(ts_ms).encode()),
        ("streamkit.stream_time", str(stream_time_ms).encode()),
    ]
    return headers
