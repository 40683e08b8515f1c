"""A minimal HTTP/1.1 client on asyncio for `http.openai`: pooled keep-alive connections,
`Transfer-Encoding: chunked`, `Content-Length` and read-until-close bodies, bounded buffers.

Why not aiohttp: per token it did 1.3x the work of a bare asyncio client (perf/http_client.py,
docs/stages.md), and it hands data over when the reading coroutine runs, not when the socket
was read. Here every segment the socket gives is stamped with `time.monotonic_ns()` in
`data_received`, before any parsing: the stamp is the arrival, whatever the loop does next.

What it does not do: redirects, proxies, compression (no `Accept-Encoding` is sent),
pipelining, HTTP/2. A connection that breaks, or whose response was not read to its end, is
closed, never reused; a reused idle connection the server had closed before answering is
retried once on a new one.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from urllib.parse import urlsplit

from stages.contracts.errors import RunFailedError

MAX_HEAD_BYTES = 64 << 10
"""The largest response head (status line and headers) accepted."""
MAX_CHUNK_LINE_BYTES = 4 << 10
"""The largest chunk-size or trailer line accepted."""
PAUSE_BYTES = 1 << 20
"""Unread bytes past which a connection stops reading its socket until they are consumed."""


class HttpError(RunFailedError, ConnectionError):
    """A response that broke the protocol or a connection that broke; the text is one line."""


class _Connection(asyncio.Protocol):
    """One TCP connection: what it receives is queued as segments beside their arrival times
    (two deques: no tuple per segment, less for the collector to track)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.segments: collections.deque[bytes] = collections.deque()
        self.stamps: collections.deque[int] = collections.deque()
        self.stamp_ns = 0
        """The arrival time of the segment `segment` returned last."""
        self.buffered = 0
        self.closed = False
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.stamps.append(time.monotonic_ns())
        self.segments.append(data)
        self.buffered += len(data)
        if self.buffered > PAUSE_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def arrival(self) -> asyncio.Future[None]:
        """A future done when more data (or the end) arrives: awaited directly, not through a
        coroutine, so waiting allocates one object a token."""
        waiter = self.waiter = asyncio.get_running_loop().create_future()
        return waiter

    async def segment(self) -> bytes | None:
        """The next received segment (its arrival time in `stamp_ns`); None once the peer has
        closed."""
        while not self.segments:
            if self.closed:
                return None
            await self.arrival()
        return self.pop()

    def pop(self) -> bytes:
        """The next received segment, which must be there (`stamp_ns`: its arrival time)."""
        self.stamp_ns = self.stamps.popleft()
        data = self.segments.popleft()
        self.buffered -= len(data)
        if self.paused and self.buffered < PAUSE_BYTES // 2 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def push_back(self, stamp_ns: int, data: bytes) -> None:
        self.stamps.appendleft(stamp_ns)
        self.segments.appendleft(data)
        self.buffered += len(data)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


_HEX_DIGITS = b"0123456789abcdefABCDEF"


def _chunk_size(line: bytes) -> int:
    """The size a chunk-size line (without its line end) gives; extensions ignored."""
    digits = line.split(b";", 1)[0].strip()
    if not digits or digits.strip(_HEX_DIGITS):
        raise HttpError(f"malformed chunk size {line[:40]!r}")
    return int(digits, 16)


class ChunkedDecoder:
    """`Transfer-Encoding: chunked` bodies, fed as received: the data out, without buffering a
    chunk whole; `done` after the last chunk and its trailers; `rest` = bytes past the end."""

    __slots__ = ("done", "line", "remaining", "rest", "state")

    def __init__(self) -> None:
        self.state = "size"  # size -> data -> crlf -> size ... -> trailer
        self.line = b""
        self.remaining = 0
        self.done = False
        self.rest = b""

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        position, end = 0, len(data)
        while position < end and not self.done:
            if self.state == "size" and not self.line:  # the common case, in one step
                after = self._whole_chunk(data, position, out)
                if after > position:
                    position = after
                    continue
            if self.state == "data":
                taken = min(self.remaining, end - position)
                out.append(data[position : position + taken])
                position += taken
                self.remaining -= taken
                if not self.remaining:
                    self.state = "crlf"
                continue
            newline = data.find(b"\n", position)
            if newline < 0:
                self._grow_line(data[position:])
                break
            self._grow_line(data[position:newline])
            position = newline + 1
            self._end_line()
        if self.done:
            self.rest = data[position:]
        return out

    def _whole_chunk(self, data: bytes, position: int, out: list[bytes]) -> int:
        """Where `data` goes on after a chunk that lies whole in it from `position` (size line,
        data, CRLF), its data appended to `out`; `position` itself when it does not."""
        newline = data.find(b"\n", position, position + 32)
        if newline < 0:
            return position
        size = _chunk_size(data[position:newline].rstrip(b"\r"))
        start = newline + 1
        stop = start + size
        if size == 0 or data[stop : stop + 2] != b"\r\n":
            return position  # the last chunk, or one that continues in a later segment
        out.append(data[start:stop])
        return stop + 2

    def _grow_line(self, part: bytes) -> None:
        self.line += part
        if len(self.line) > MAX_CHUNK_LINE_BYTES:
            raise HttpError(f"a chunked-encoding line exceeds {MAX_CHUNK_LINE_BYTES} bytes")

    def _end_line(self) -> None:
        line, self.line = self.line.rstrip(b"\r"), b""
        if self.state == "size":
            size = _chunk_size(line)
            self.state, self.remaining = ("trailer", 0) if size == 0 else ("data", size)
        elif self.state == "crlf":
            if line:
                raise HttpError("malformed chunked body: no CRLF after a chunk's data")
            self.state = "size"
        elif not line:  # the blank line after the trailers
            self.done = True


class Response:
    """A response being read: `status`, `headers` (lower-case names), the body by `piece`."""

    def __init__(self, connection: _Connection, status: int, headers: dict[str, str]) -> None:
        self.connection, self.status, self.headers = connection, status, headers
        self.finished = False
        self.keep_alive = headers.get("connection", "").lower() != "close"
        self._decoder: ChunkedDecoder | None = None
        self._left: int | None = None
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._decoder = ChunkedDecoder()
        elif "content-length" in headers:
            length = headers["content-length"]
            if not length.isdigit():
                raise HttpError(f"malformed Content-Length {length[:40]!r}")
            self._left = int(length)
        else:
            self.keep_alive = False  # the body ends when the server closes
        self.finished = self._left == 0

    async def piece(self) -> bytes | None:
        """The body's next bytes (`connection.stamp_ns`: the arrival time of the segment that
        held them); None at the end of the body."""
        while (data := self.piece_nowait()) == b"":
            await self.connection.arrival()
        return data

    def piece_nowait(self) -> bytes | None:
        """The body's next bytes if some have arrived, b"" when none have yet (await
        `connection.arrival()`), None at the end of the body. The hot path of a stream: no
        coroutine per token."""
        connection = self.connection
        while not self.finished:
            if not connection.segments:
                if not connection.closed:
                    return b""
                if self._decoder is None and self._left is None:
                    self.finished = True
                    return None
                raise HttpError("the server closed the connection before the body ended")
            data = self._unframe(connection.pop())
            if data:
                return data
        return None

    def _unframe(self, data: bytes) -> bytes:
        if self._decoder is not None:
            out = self._decoder.feed(data)
            if self._decoder.done:
                self.finished = True
                self.keep_alive = self.keep_alive and not self._decoder.rest
            return out[0] if len(out) == 1 else b"".join(out)
        if self._left is not None:
            if len(data) >= self._left:
                self.keep_alive = self.keep_alive and len(data) == self._left
                data, self._left, self.finished = data[: self._left], 0, True
            else:
                self._left -= len(data)
        return data


class ConnectionPool:
    """Keep-alive connections to one origin (`http://host:port` or https), reused LIFO."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        secure = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if secure else 80)
        self.ssl = ssl.create_default_context() if secure else None
        literal = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        self.host_header = f"{literal}:{self.port}".encode()
        self.idle: list[_Connection] = []
        self.opened = 0
        """Connections opened so far (tests, diagnostics)."""

    async def _acquire(self) -> tuple[_Connection, bool]:
        while self.idle:
            connection = self.idle.pop()
            if not connection.closed and not connection.segments:
                return connection, True
            connection.abort()
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(
            _Connection, self.host, self.port, ssl=self.ssl,
            server_hostname=self.host if self.ssl else None,
        )  # fmt: skip
        self.opened += 1
        return connection, False

    async def request(self, head: bytes, body: bytes) -> Response:
        """Send one request (`head` ends with the blank line) and read the response's head."""
        while True:
            connection, reused = await self._acquire()
            assert connection.transport is not None
            connection.transport.write(head + body)
            try:
                return await _read_head(connection)
            except _ClosedUnanswered:
                connection.abort()
                if not reused:
                    raise HttpError("the server closed the connection without answering") from None
            except BaseException:
                connection.abort()
                raise

    def release(self, response: Response, complete: bool) -> None:
        """Give the response's connection back: kept when its body was read to the end."""
        connection = response.connection
        if complete and response.finished and response.keep_alive and not connection.closed:
            self.idle.append(connection)
        else:
            connection.abort()

    def close(self) -> None:
        for connection in self.idle:
            connection.abort()
        self.idle.clear()


class _ClosedUnanswered(RunFailedError):
    """The connection closed before any byte of a response came."""


async def _read_head(connection: _Connection) -> Response:
    buffer = b""
    while True:
        segment = await connection.segment()
        if segment is None:
            if not buffer:
                raise _ClosedUnanswered
            raise HttpError("the server closed the connection inside the response head")
        stamp_ns = connection.stamp_ns
        buffer += segment
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(buffer) > MAX_HEAD_BYTES:
            raise HttpError(f"the response head exceeds {MAX_HEAD_BYTES} bytes")
    if len(buffer) > end + 4:
        connection.push_back(stamp_ns, buffer[end + 4 :])
    lines = buffer[:end].decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    status = rest[:3]
    if not version.startswith("HTTP/1.") or not status.isdigit():
        raise HttpError(f"not an HTTP/1.x response: {lines[0][:60]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Response(connection, int(status), headers)
