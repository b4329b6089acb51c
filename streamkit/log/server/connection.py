"""One client connection: read frames, answer them in order, close on anything unreadable.

Invariants:

* responses leave in request order (clients match them to requests FIFO): one request is
  handled at a time, while the protocol reads ahead at most ``max_in_flight`` frames (then
  it pauses reading); answers to a burst of queued requests are written together, and never
  held back once the queue is empty (a client waiting for an answer always gets it);
* a response is a list of parts (``frames.py``): bytes are written, a ``FileRange`` of
  verified segment bytes goes out with ``loop.sendfile`` (``sendfile(2)`` where the
  transport allows it; read and written on a TLS listener) once everything before it is
  written, so the order holds;
* on a SASL listener, frames before authentication are bounded by
  ``session.PRE_AUTH_MAX_FRAME_BYTES``, a connection not authenticated within
  ``BrokerConfig.authentication_timeout_ms`` is closed by the sweep, and a refused handshake or login
  closes the connection right after its answer (``session.py``);
* a request that has not arrived whole ``request_timeout_ms`` after it started arriving, and
  a connection with no request for ``connections_max_idle_ms`` (none in progress), are
  closed (``FrameProtocol.stale``, checked by the broker's sweep): a client that sends half
  a frame and stops cannot hold a connection slot for good;
* a frame whose size is negative, too small for a header or above ``max_frame_bytes``,
  an unreadable request, an API we do not serve or a failing handler closes *this*
  connection after the responses already due; nothing a client sends reaches past its
  connection, so the broker keeps serving everyone else.

Reading (``FrameProtocol``, an ``asyncio.BufferedProtocol``): the socket is read into a
64 KiB staging buffer, from which small frames are copied out whole. A frame that does not
fit in it gets a ``bytearray`` of its own size and the rest of it is received straight into
that, so the bytes of a large Produce request are copied once, by the kernel.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import struct
from collections.abc import Callable

from streamkit.log.segment import FileRange
from streamkit.log.server.dispatch import Dispatcher
from streamkit.log.server.errors import ServerError
from streamkit.log.server.frames import Part
from streamkit.log.server.session import PRE_AUTH_MAX_FRAME_BYTES, Session

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_MIN_FRAME = 8  # api key, api version, correlation id
_STAGING_BYTES = 64 * 1024
_COALESCE_BYTES = 64 * 1024
_JOIN_BYTES = 64 * 1024  # smaller byte parts are joined into one write; larger ones go alone

Frame = bytes | bytearray


class FrameProtocol(asyncio.BufferedProtocol):
    """The reading half of a connection, and the flow control of its writing half.

    Frames (without their size field) queue up for ``next_frame``; None in the queue means
    the end: EOF, a lost connection or a frame size out of bounds.
    """

    def __init__(
        self, on_connect: Callable[[FrameProtocol], None], *, max_frame_bytes: int, max_in_flight: int
    ) -> None:
        self._on_connect = on_connect
        self._max_frame_bytes = max_frame_bytes
        self._max_in_flight = max_in_flight
        self.transport: asyncio.Transport | None = None
        self.peer: object = None
        # The connection's listener, principal and SASL state, set by the broker on accept.
        self.session: Session | None = None
        self._staging = bytearray(_STAGING_BYTES)
        self._filled = 0
        self._large: bytearray | None = None  # a frame too big for staging, being received
        self._large_filled = 0
        self._frames: collections.deque[Frame | None] = collections.deque()
        self._ended = False
        self._reading_paused = False
        self._frame_waiter: asyncio.Future[None] | None = None
        self._writing_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._lost: asyncio.Future[None] | None = None
        self._lost_exc: BaseException | None = None
        # Timeouts. The hot path only counts frames; the broker's sweep (``stale``) keeps the
        # times, so a busy connection pays no clock reads for them.
        self.frames_received = 0
        self.handling = False  # a request of this connection is being answered
        self._seen_frames = -1
        self._quiet_since = 0.0  # sweep time since which no frame arrived and none ran
        self._partial_since: float | None = None  # sweep time it first saw a partial frame

    # -- asyncio callbacks -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        self._lost = asyncio.get_running_loop().create_future()
        self._on_connect(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._large is not None:
            return memoryview(self._large)[self._large_filled :]
        return memoryview(self._staging)[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._large is not None:
            self._large_filled += nbytes
            if self._large_filled == len(self._large):
                self._push(self._large)
                self._large = None
            return
        self._filled += nbytes
        self._split_frames()

    def eof_received(self) -> bool:
        self._end()
        # Keep the transport open: responses already due still go out. (An SSL transport
        # cannot half-close and warns about True, so it is not asked to.)
        return not (self.session is not None and self.session.listener.tls)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost_exc = exc or ConnectionResetError("connection lost")
        self._end()
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(self._lost_exc)
        self._drain_waiters.clear()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    # -- frames ----------------------------------------------------------------------------

    def _split_frames(self) -> None:
        staging = self._staging
        pos = 0
        filled = self._filled
        while not self._ended and filled - pos >= 4:
            (size,) = _SIZE.unpack_from(staging, pos)
            limit = self._max_frame_bytes
            if self.session is not None and not self.session.authenticated:
                limit = min(limit, PRE_AUTH_MAX_FRAME_BYTES)
            if size < _MIN_FRAME or size > limit:
                logger.warning(
                    "closing connection %s: frame size %d outside [%d, %d]",
                    self.peer, size, _MIN_FRAME, limit,
                )
                self._end()
                break
            start = pos + 4
            if filled - start >= size:
                self._push(bytes(staging[start : start + size]))
                pos = start + size
            elif 4 + size > len(staging):
                # Too big for staging: the rest is received straight into its own buffer.
                have = filled - start
                large = bytearray(size)
                large[:have] = staging[start:filled]
                self._large, self._large_filled = large, have
                pos = filled
                break
            else:
                break
        if pos:
            rest = filled - pos
            staging[:rest] = staging[pos:filled]
            self._filled = rest

    def _push(self, frame: Frame | None) -> None:
        self._frames.append(frame)
        self.frames_received += 1
        waiter = self._frame_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if len(self._frames) >= self._max_in_flight and not self._reading_paused and self.transport:
            self._reading_paused = True
            self.transport.pause_reading()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._push(None)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    async def next_frame(self) -> Frame | None:
        """The next request frame; None once no more will come."""
        while not self._frames:
            self._frame_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._frame_waiter
            finally:
                self._frame_waiter = None
        frame = self._frames.popleft()
        if (
            self._reading_paused
            and not self._ended
            and len(self._frames) < self._max_in_flight
            and self.transport is not None
        ):
            self._reading_paused = False
            self.transport.resume_reading()
        return frame

    def has_frames(self) -> bool:
        return bool(self._frames)

    # -- timeouts --------------------------------------------------------------------------

    def stale(self, now: float, request_timeout_s: float, max_idle_s: float) -> str | None:
        """Why this connection should be closed at ``now`` (loop time, seconds), if it should.

        Called periodically: a frame counted or a request running since the last call makes
        the connection active again; bytes of a frame that are not complete at two calls
        ``request_timeout_s`` apart mean a request that is not coming.
        """
        if self.frames_received != self._seen_frames or self.handling:
            self._seen_frames = self.frames_received
            self._quiet_since = now
            self._partial_since = None
        if self._ended:
            return None
        session = self.session
        if session is not None and session.auth_deadline is not None and now >= session.auth_deadline:
            return "not authenticated in time"
        if self._filled or self._large is not None:
            if self._partial_since is None:
                self._partial_since = now
            elif now - self._partial_since >= request_timeout_s:
                received = self._large_filled if self._large is not None else self._filled
                return f"an incomplete request ({received} bytes) for {now - self._partial_since:.1f} s"
            return None
        self._partial_since = None
        if now - self._quiet_since >= max_idle_s:
            return f"idle for {now - self._quiet_since:.0f} s"
        return None

    def expire(self, reason: str) -> None:
        """Close this connection now (see ``stale``)."""
        logger.info("closing connection %s: %s", self.peer, reason)
        self._end()
        if self.transport is not None:
            self.transport.close()

    # -- writing ---------------------------------------------------------------------------

    async def drain(self) -> None:
        if self._lost_exc is not None:
            raise self._lost_exc
        if not self._writing_paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def write(self, data: bytes | bytearray) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if self._lost is not None:
            await self._lost


async def serve_connection(protocol: FrameProtocol, dispatcher: Dispatcher) -> None:
    peer = protocol.peer
    try:
        await _answer(protocol, dispatcher, peer)
    except (ConnectionError, OSError) as exc:
        logger.debug("connection %s lost: %s", peer, exc)
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            await protocol.close()


async def _answer(protocol: FrameProtocol, dispatcher: Dispatcher, peer: object) -> None:
    client_host = peer[0] if isinstance(peer, tuple) and peer else ""
    # Responses wait here while more requests are already queued, then leave in one write:
    # a pipelining client costs one send per burst instead of one per response.
    ready: list[Part] = []
    ready_bytes = 0
    try:
        while True:
            if ready and (not protocol.has_frames() or ready_bytes >= _COALESCE_BYTES):
                await _send(protocol, ready)
                ready = []
                ready_bytes = 0
                await protocol.drain()
            frame = await protocol.next_frame()
            if frame is None:
                return
            protocol.handling = True
            try:
                response = await dispatcher.handle(frame, client_host, protocol.session)
            except ServerError as exc:
                logger.warning("closing connection %s: %s", peer, exc)
                return
            except Exception:
                # A handler bug must cost this connection only, never the broker.
                logger.exception("closing connection %s: request failed", peer)
                return
            finally:
                protocol.handling = False
            if response is not None:
                ready += response
                ready_bytes += sum(len(part) for part in response)
            if protocol.session is not None and protocol.session.close_after_response:
                logger.info("closing connection %s: SASL handshake or authentication refused", peer)
                return  # the answer still goes out (below)
    finally:
        if ready and protocol.transport is not None and not protocol.transport.is_closing():
            # Answers due before the end (or the bad request) still go out. No await here
            # (this may run on cancellation): file ranges are read instead.
            protocol.write(b"".join(p.read() if isinstance(p, FileRange) else p for p in ready))


async def _send(protocol: FrameProtocol, parts: list[Part]) -> None:
    """Write ``parts`` in order: small byte parts joined, file ranges by ``loop.sendfile``."""
    small: list[bytes | bytearray] = []
    for part in parts:
        if isinstance(part, FileRange):
            if small:
                protocol.write(small[0] if len(small) == 1 else b"".join(small))
                small = []
            if protocol.session is not None and protocol.session.listener.tls:
                # TLS encrypts in user space: sendfile(2) cannot apply, and asyncio's fallback
                # swaps the transport's protocol, which a buffered SSL protocol does not survive.
                protocol.write(part.read())
            else:
                await _sendfile(protocol, part)
        elif len(part) >= _JOIN_BYTES:
            if small:
                protocol.write(small[0] if len(small) == 1 else b"".join(small))
                small = []
            protocol.write(part)
        else:
            small.append(part)
    if small:
        protocol.write(small[0] if len(small) == 1 else b"".join(small))


async def _sendfile(protocol: FrameProtocol, part: FileRange) -> None:
    loop = asyncio.get_running_loop()
    assert protocol.transport is not None
    # A file object over the segment's descriptor, which ``part`` keeps open; sendfile moves
    # this object's position only, never the segment's (appends use O_APPEND, reads pread).
    with open(part.fileno(), "rb", buffering=0, closefd=False) as file:
        try:
            sent = await loop.sendfile(protocol.transport, file, part.position, part.size)
        except RuntimeError as exc:  # the transport is closing
            raise ConnectionError(str(exc)) from exc
    if sent != part.size:
        # The frame's length is already out: a short file cannot be patched, only cut off.
        raise ConnectionError(f"sent {sent} of {part.size} bytes of {part.segment.log_path}")
