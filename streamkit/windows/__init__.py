"""Event-time windows: specs, their plain-code algorithms and the aggregation driver.

Wiring windows into tables, the DSL and the runtime lives
above this package. See ``spec`` (declarations and close/expiry rules), ``keys`` (store key
layout), ``session`` and ``sliding`` (per-record algorithms), ``aggregate`` (the driver), ``join``
(the windowed stream-stream join driver).

Owns: what the paragraph above lists.
May import: ``tables`` and ``_core``.
"""

from streamkit.windows.aggregate import (
    Aggregation,
    Emit,
    LateRecord,
    RunResult,
    Step,
    WindowAggregator,
    WindowResult,
    run,
)
from streamkit.windows.join import JoinResult, JoinRun, JoinStep, WindowJoin, run_join
from streamkit.windows.keys import decode_window_key, encode_window_key, window_range
from streamkit.windows.session import SessionMerge, merge_session
from streamkit.windows.sliding import SlidingOp, plan_sliding
from streamkit.windows.spec import Hopping, Session, Sliding, Tumbling, WindowSpec, duration_ms
from streamkit.windows.store import SortedMemoryStore, WindowStore
from streamkit.windows.streamtime import NO_TIMESTAMP, StreamTime

__all__ = [
    "NO_TIMESTAMP",
    "Aggregation",
    "Emit",
    "Hopping",
    "JoinResult",
    "JoinRun",
    "JoinStep",
    "LateRecord",
    "RunResult",
    "Session",
    "SessionMerge",
    "Sliding",
    "SlidingOp",
    "SortedMemoryStore",
    "Step",
    "StreamTime",
    "Tumbling",
    "WindowAggregator",
    "WindowJoin",
    "WindowResult",
    "WindowSpec",
    "WindowStore",
    "decode_window_key",
    "duration_ms",
    "encode_window_key",
    "merge_session",
    "plan_sliding",
    "run",
    "run_join",
    "window_range",
]
