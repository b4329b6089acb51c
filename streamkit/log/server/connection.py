"""One client connection: read frames, answer them in order, close on anything unreadable.

Invariants:

* responses leave in request order (clients match them to requests FIFO): one request is
  handled at a time, while the reader task reads ahead at most ``max_in_flight`` frames;
  answers to a burst of queued requests are written together, and never held back once the
  queue is empty (a client waiting for an answer always gets it);
* a response is a list of parts (``frames.py``): bytes are written, a ``FileRange`` of
  verified segment bytes goes out with ``loop.sendfile`` (``sendfile(2)`` where the
  transport allows it) once everything before it is written, so the order holds;
* a frame whose size is negative, too small for a header or above ``max_frame_bytes``,
  an unreadable request, an API we do not serve or a failing handler closes *this*
  connection after the responses already due; nothing a client sends reaches past its
  connection, so the broker keeps serving everyone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct

from streamkit.log.segment import FileRange
from streamkit.log.server.dispatch import Dispatcher
from streamkit.log.server.errors import ServerError
from streamkit.log.server.frames import Part

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_MIN_FRAME = 8  # api key, api version, correlation id
_COALESCE_BYTES = 64 * 1024
_JOIN_BYTES = 64 * 1024  # smaller byte parts are joined into one write; larger ones go alone


async def serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    dispatcher: Dispatcher,
    *,
    max_frame_bytes: int,
    max_in_flight: int,
) -> None:
    peer = writer.get_extra_info("peername")
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=max_in_flight)
    try:
        async with asyncio.TaskGroup() as tasks:
            reading = tasks.create_task(_read_frames(reader, queue, max_frame_bytes, peer))
            await _answer(queue, writer, dispatcher, peer)
            reading.cancel()
    except* (ConnectionError, OSError) as group:
        logger.debug("connection %s lost: %s", peer, group.exceptions[0])
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


async def _read_frames(
    reader: asyncio.StreamReader, queue: asyncio.Queue[bytes | None], max_frame_bytes: int, peer: object
) -> None:
    """Queue each frame; queue None at the end (EOF, a bad size, a lost connection)."""
    await _read_until_end(reader, queue, max_frame_bytes, peer)
    # Not in a ``finally``: when cancelled, nobody is left to take it.
    await queue.put(None)


async def _read_until_end(
    reader: asyncio.StreamReader, queue: asyncio.Queue[bytes | None], max_frame_bytes: int, peer: object
) -> None:
    try:
        while True:
            head = await reader.readexactly(4)
            (size,) = _SIZE.unpack(head)
            if size < _MIN_FRAME or size > max_frame_bytes:
                logger.warning(
                    "closing connection %s: frame size %d outside [%d, %d]",
                    peer, size, _MIN_FRAME, max_frame_bytes,
                )
                return
            await queue.put(await reader.readexactly(size))
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        return  # the client closed the connection or it broke


async def _answer(
    queue: asyncio.Queue[bytes | None], writer: asyncio.StreamWriter, dispatcher: Dispatcher, peer: object
) -> None:
    client_host = peer[0] if isinstance(peer, tuple) and peer else ""
    # Responses wait here while more requests are already queued, then leave in one write:
    # a pipelining client costs one send per burst instead of one per response.
    ready: list[Part] = []
    ready_bytes = 0
    try:
        while True:
            if ready and (queue.empty() or ready_bytes >= _COALESCE_BYTES):
                await _send(writer, ready)
                ready = []
                ready_bytes = 0
                await writer.drain()
            frame = await queue.get()
            if frame is None:
                return
            try:
                response = await dispatcher.handle(frame, client_host)
            except ServerError as exc:
                logger.warning("closing connection %s: %s", peer, exc)
                return
            except Exception:
                # A handler bug must cost this connection only, never the broker.
                logger.exception("closing connection %s: request failed", peer)
                return
            if response is not None:
                ready += response
                ready_bytes += sum(len(part) for part in response)
    finally:
        if ready:  # answers due before the end (or the bad request) still go out
            # No await here (this may run on cancellation): file ranges are read instead.
            writer.write(b"".join(p.read() if isinstance(p, FileRange) else p for p in ready))
            # no drain: closing the writer flushes it


async def _send(writer: asyncio.StreamWriter, parts: list[Part]) -> None:
    """Write ``parts`` in order: small byte parts joined, file ranges by ``loop.sendfile``."""
    small: list[bytes | bytearray] = []
    for part in parts:
        if isinstance(part, FileRange):
            if small:
                writer.write(small[0] if len(small) == 1 else b"".join(small))
                small = []
            await _sendfile(writer, part)
        elif len(part) >= _JOIN_BYTES:
            if small:
                writer.write(small[0] if len(small) == 1 else b"".join(small))
                small = []
            writer.write(part)
        else:
            small.append(part)
    if small:
        writer.write(small[0] if len(small) == 1 else b"".join(small))


async def _sendfile(writer: asyncio.StreamWriter, part: FileRange) -> None:
    loop = asyncio.get_running_loop()
    # A file object over the segment's descriptor, which ``part`` keeps open; sendfile moves
    # this object's position only, never the segment's (appends use O_APPEND, reads pread).
    with open(part.fileno(), "rb", buffering=0, closefd=False) as file:
        sent = await loop.sendfile(writer.transport, file, part.position, part.size)
    if sent != part.size:
        # The frame's length is already out: a short file cannot be patched, only cut off.
        raise ConnectionError(f"sent {sent} of {part.size} bytes of {part.segment.log_path}")
