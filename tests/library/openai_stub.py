"""A scripted OpenAI-compatible stub server on loopback, for `http.openai`'s tests and
`perf/http_client.py`.

HTTP/1.1 with keep-alive on asyncio streams; `/v1/completions` and `/v1/chat/completions`,
streamed (chunked transfer encoding, one SSE event per HTTP chunk) or not. The script: the first
token `ttft_ms` after the request arrived (stamped when the event loop handed the stub its
first bytes, before another request's parsing could delay it), then one every `gap_ms`,
`tokens` content chunks, a last chunk with `finish_reason`, a usage chunk when the request
asked for it (`usage`: completion_tokens = tokens x `tokens_per_chunk`), then `[DONE]`. The
stub notes when it actually wrote each chunk (`time.monotonic_ns()` after the write: on one
machine the client's arrival stamps are on the same clock), per request keyed by the prompt,
and how many connections it accepted, and how it kept its script (`first_late_ns`,
`last_late_ns`: each request's first and last chunk's write - its scripted time;
`write_gap_ns`: the gaps between writes); `GET /stats` returns them as JSON (`GET /stats/take`
also forgets the timings).

Hostile `mode`s: `ok`, `bad_json` (a data line that is not JSON), `no_data` (a line that is
not SSE), `http_500`, `truncate` (the connection closed mid-stream), `no_done` (a clean end of
the body without `[DONE]` or `finish_reason`), `never` (reads the request, never answers),
`huge` (a 16 MiB data line without a newline, written 64 KiB at a time), `error_event` (an
`{"error": ...}` chunk mid-stream, as `transformers serve` reports a failure), `one_shot` (a
complete answer, then the kept-alive connection is closed), `drop_reused` (a second request
on a connection is read and the connection closed without an answer).

Run as a process: `python -m tests.library.openai_stub --ttft-ms 5 --gap-ms 2 --tokens 16
[--cpu N] [--port P]` prints `PORT` on its first line and serves until killed (as a `command`
service: `--port {port}`, ready path `/stats`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, SupportsIndex

HUGE_BYTES = 16 << 20
HUGE_PIECE = b"x" * (64 << 10)


@dataclass
class Script:
    ttft_ms: float = 2.0
    gap_ms: float = 1.0
    tokens: int = 8
    mode: str = "ok"
    usage: bool = True
    tokens_per_chunk: int = 1
    prompt_tokens: int | None = None
    """`usage.prompt_tokens` the server reports (None: left out of usage)."""
    max_streams: int = 0
    """Answers served at once (the others wait, as requests queue for a busy server's
    batch slots); 0 = no limit."""

    def usage_document(self) -> dict[str, int]:
        """The `usage` the stub reports."""
        usage = {"completion_tokens": self.tokens * self.tokens_per_chunk}
        if self.prompt_tokens is not None:
            usage["prompt_tokens"] = self.prompt_tokens
        return usage


@dataclass
class Stats:
    connections: int = 0
    requests: int = 0
    sent_ns: dict[str, list[int]] = field(default_factory=dict)
    """Prompt (or the chat message) -> when each content chunk was written."""
    read_ns: dict[str, int] = field(default_factory=dict)
    """Prompt -> when its request had been read."""
    first_late_ns: list[int] = field(default_factory=list)
    """Each streamed request's first content chunk: when it was written - when the script had
    it due (the stub's own lateness: part of any client's error against the script)."""
    last_late_ns: list[int] = field(default_factory=list)
    """The same for each streamed request's last content chunk."""
    write_gap_ns: list[int] = field(default_factory=list)
    """Every gap between two consecutive content chunks' writes (the server's own ITL)."""
    authorization: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def lateness(self) -> dict[str, list[int]]:
        """The stub's own timings against its script, by their `/stats` names."""
        return {
            "first_late_ns": self.first_late_ns,
            "last_late_ns": self.last_late_ns,
            "write_gap_ns": self.write_gap_ns,
        }


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(document: Any) -> bytes:
    return _chunk(b"data: " + json.dumps(document).encode() + b"\n\n")


def _chunk_object(chat: bool) -> str:
    """A streamed chunk's `object`, as OpenAI and vLLM name it."""
    return "chat.completion.chunk" if chat else "text_completion"


class _StampedReader(asyncio.StreamReader):
    """A stream reader that notes when bytes arrived into an empty buffer: the stub's "request
    read" stamp. Stamped in the protocol's callback, so a burst of requests handled one after
    another in the stub's loop all carry the time their bytes came, not the time the stub got
    round to parsing each."""

    arrived_ns = 0

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        if not self._buffer:  # type: ignore[attr-defined]
            self.arrived_ns = time.monotonic_ns()
        super().feed_data(data)


class StubServer:
    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        self.stats = Stats()
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self, port: int = 0) -> int:
        self._slots = asyncio.Semaphore(self.script.max_streams or 1_000_000_000)
        loop = asyncio.get_running_loop()

        def protocol() -> asyncio.StreamReaderProtocol:
            return asyncio.StreamReaderProtocol(_StampedReader(), self._connection)

        self._server = await loop.create_server(protocol, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        """Stop listening and end every connection's task."""
        if self._server is not None:
            self._server.close()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.connections += 1
        served = 0
        try:
            while True:
                if self.script.mode == "drop_reused" and served:
                    await reader.readuntil(b"\r\n\r\n")  # a second request: closed unanswered
                    break
                if not await self._one_request(reader, writer):
                    break
                served += 1
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or the stub is shutting down
        finally:
            writer.close()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        read_ns = reader.arrived_ns if isinstance(reader, _StampedReader) else time.monotonic_ns()
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        stats = self.stats
        stats.requests += 1
        if method == "GET" and path in ("/stats", "/stats/take"):
            self._reply(writer, 200, json.dumps(self._stats_document()).encode())
            if path == "/stats/take":  # the timings handed over are forgotten
                stats.sent_ns.clear()
                stats.read_ns.clear()
                for timings in stats.lateness().values():
                    timings.clear()
            return True
        if "authorization" in headers:
            self.stats.authorization.append(headers["authorization"])
        request = json.loads(body)
        self.stats.bodies.append(request)
        async with self._slots:
            if self.script.max_streams:  # a queued request's script starts when it is served
                read_ns = time.monotonic_ns()
            return await self._answer(request, path, read_ns, writer)

    def _stats_document(self) -> dict[str, Any]:
        stats = self.stats
        return {
            "connections": stats.connections,
            "requests": stats.requests,
            "sent_ns": stats.sent_ns,
            "read_ns": stats.read_ns,
            **stats.lateness(),
            "authorization": stats.authorization,
        }

    @staticmethod
    def _reply(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
        reason = {200: "OK", 500: "Internal Server Error"}[status]
        writer.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status, reason.encode(), len(body), body)
        )

    async def _answer(
        self, request: dict[str, Any], path: str, read_ns: int, writer: asyncio.StreamWriter
    ) -> bool:
        script, chat = self.script, path.endswith("/chat/completions")
        prompt = request["messages"][-1]["content"] if chat else request["prompt"]
        self.stats.read_ns[prompt] = read_ns
        if script.mode == "never":
            await asyncio.Event().wait()
        if script.mode == "http_500":
            self._reply(writer, 500, b'{"error": {"message": "the stub fails on purpose"}}')
            return True
        if not request.get("stream"):
            self._reply(writer, 200, json.dumps(self._whole(chat)).encode())
            return True
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        sent = self.stats.sent_ns.setdefault(prompt, [])
        return await self._stream(request, chat, read_ns, sent, writer)

    def _whole(self, chat: bool) -> dict[str, Any]:
        script = self.script
        text = "".join(f"t{index} " for index in range(script.tokens))
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        document: dict[str, Any] = {
            "object": "chat.completion" if chat else "text_completion",
            "choices": [choice],
        }
        if script.usage:
            document["usage"] = script.usage_document()
        return document

    @staticmethod
    @lru_cache(maxsize=4096)
    def _content(chat: bool, text: str, finish: str | None) -> bytes:
        """A content chunk's HTTP chunk (made once: the stub's own cost stays small), with the
        `object` a real server names it by (AIPerf reads only chunks that carry it)."""
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
        if chat:
            choice["delta"] = {"content": text}
        else:
            choice["text"] = text
        return _event({"object": _chunk_object(chat), "choices": [choice]})

    async def _stream(
        self,
        request: dict[str, Any],
        chat: bool,
        read_ns: int,
        sent: list[int],
        writer: asyncio.StreamWriter,
    ) -> bool:
        script = self.script
        previous_ns = read_ns
        for index in range(script.tokens):
            due_ns = read_ns + int((script.ttft_ms + index * script.gap_ms) * 1e6)
            delay_s = (due_ns - time.monotonic_ns()) / 1e9
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            if script.mode == "huge" and index == 1:
                return await self._huge(writer)
            writer.write(self._content(chat, f"t{index} ", None))
            written_ns = time.monotonic_ns()
            sent.append(written_ns)
            self._note_write(index, due_ns, written_ns, previous_ns)
            previous_ns = written_ns
            if script.mode == "bad_json" and index == 1:
                writer.write(_chunk(b"data: {not json\n\n"))
            if script.mode == "no_data" and index == 1:
                writer.write(_chunk(b"hello, this is not SSE\n\n"))
            if script.mode == "error_event" and index == 1:
                writer.write(_event({"error": "CUDA out of memory"}))
            if script.mode == "truncate" and index == 2:
                await writer.drain()
                writer.transport.abort()
                return False
        return await self._finish(request, chat, writer)

    def _note_write(self, index: int, due_ns: int, written_ns: int, previous_ns: int) -> None:
        """Note content chunk `index`'s write against the script's time for it (`previous_ns`:
        the write of the chunk before it)."""
        stats = self.stats
        if index:
            stats.write_gap_ns.append(written_ns - previous_ns)
        else:
            stats.first_late_ns.append(written_ns - due_ns)
        if index == self.script.tokens - 1:
            stats.last_late_ns.append(written_ns - due_ns)

    async def _finish(
        self, request: dict[str, Any], chat: bool, writer: asyncio.StreamWriter
    ) -> bool:
        script = self.script
        if script.mode != "no_done":
            writer.write(self._content(chat, "", "length"))
            wants_usage = (request.get("stream_options") or {}).get("include_usage")
            if script.usage and wants_usage:
                usage = script.usage_document()
                writer.write(_event({"object": _chunk_object(chat), "choices": [], "usage": usage}))
            writer.write(_chunk(b"data: [DONE]\n\n"))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return script.mode != "one_shot"  # one_shot: close the kept-alive connection

    async def _huge(self, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"%x\r\ndata: " % (HUGE_BYTES + 6))
        for _ in range(HUGE_BYTES // len(HUGE_PIECE)):
            writer.write(HUGE_PIECE)
            await writer.drain()
        writer.write(b"\r\n0\r\n\r\n")
        await writer.drain()
        return True


class ThreadedStub:
    """A `StubServer` on its own event loop in a daemon thread (`with ThreadedStub(script) as
    stub: stub.url`)."""

    def __init__(self, script: Script | None = None) -> None:
        self.server = StubServer(script)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> ThreadedStub:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    @property
    def stats(self) -> Stats:
        return self.server.stats


async def _serve_forever(script: Script, port: int = 0) -> None:
    server = StubServer(script)
    port = await server.start(port)
    print(port, flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ttft-ms", type=float, default=2.0)
    parser.add_argument("--gap-ms", type=float, default=1.0)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--mode", default="ok")
    parser.add_argument("--cpu", type=int, default=None, help="pin the stub to this CPU")
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--max-streams", type=int, default=0, help="0: no limit")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    script = Script(
        ttft_ms=args.ttft_ms,
        gap_ms=args.gap_ms,
        tokens=args.tokens,
        mode=args.mode,
        max_streams=args.max_streams,
    )
    asyncio.run(_serve_forever(script, args.port))


if __name__ == "__main__":
    main()
