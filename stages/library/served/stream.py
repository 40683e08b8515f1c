"""Reading an OpenAI-compatible response: server-sent events (SSE) parsed incrementally with a
bound on an event's size, the stream's chunks gathered into text, token arrival times and the
server's usage, and the errors a request ends in. No I/O here: `stages.library.served.openai_http`
feeds the bytes as they arrive.

The SSE grammar kept (the subset OpenAI-compatible servers send): lines end with LF (CR LF
accepted); `data: VALUE` lines (one space after the colon dropped) add to the event; a blank line
ends it; `event:`, `id:`, `retry:` and `:comment` lines are skipped; any other line is malformed.
"""

from __future__ import annotations

import json
from typing import Any

from stages.contracts.errors import RunFailedError

DONE = b"[DONE]"
EXCERPT_CHARS = 120


class OpenAIRequestError(RunFailedError, RuntimeError):
    """A request that did not produce a complete response; the text is the reason."""


class StreamError(RunFailedError, ValueError):
    """A malformed or failed response; the text is one line (the `errors` row's reason)."""


def excerpt(data: bytes | str) -> str:
    """The start of `data` on one line, for an error's reason."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "..."


_SKIPPED_FIELDS = (b"event:", b"id:", b"retry:", b":")


class SseReader:
    """Bytes in (`feed`, as read), the `data` of each complete event out. An unfinished line or
    event larger than `max_event_bytes` raises `StreamError`: memory stays bounded whatever the
    server sends."""

    __slots__ = ("_data", "_data_bytes", "_pending", "max_event_bytes")

    def __init__(self, max_event_bytes: int) -> None:
        self.max_event_bytes = max_event_bytes
        self._pending = b""
        self._data: list[bytes] = []
        self._data_bytes = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of every event that `chunk` completes (in order)."""
        lines = (self._pending + chunk if self._pending else chunk).split(b"\n")
        self._pending = lines.pop()
        if len(self._pending) > self.max_event_bytes:
            raise StreamError(f"an SSE line exceeds {self.max_event_bytes} bytes")
        events: list[bytes] = []
        for line in lines:
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data, self._data_bytes = [], 0
            elif line[:5] == b"data:":
                self._add_data(line[6:] if line[5:6] == b" " else line[5:])
            elif not line.startswith(_SKIPPED_FIELDS):
                raise StreamError(f"malformed SSE (not a data line): {excerpt(line)!r}")
        return events

    def _add_data(self, value: bytes) -> None:
        self._data_bytes += len(value)
        if self._data_bytes > self.max_event_bytes:
            raise StreamError(f"an SSE event exceeds {self.max_event_bytes} bytes")
        self._data.append(value)


_decode_json = json.JSONDecoder().decode


def _json(data: bytes) -> Any:
    try:  # UTF-8 (what SSE is), decoded here: json.loads(bytes) would first guess the encoding
        return _decode_json(data.decode())
    except ValueError:
        raise StreamError(f"malformed SSE (data is not JSON): {excerpt(data)!r}") from None


def _server_error(document: Any) -> None:
    """Raise the server's own error when a chunk or body is one (`{"error": ...}`)."""
    if isinstance(document, dict) and document.get("error"):
        error = document["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise StreamError(f"the server reported an error: {excerpt(str(message))}")


def _choice_text(choice: dict[str, Any], chat: bool) -> Any:
    """A choice's new text: `text` (completions), `delta.content` (chat stream) or
    `message.content` (chat, not streamed)."""
    if not chat:
        return choice.get("text")
    part = choice.get("delta") or choice.get("message")
    return part.get("content") if type(part) is dict else None


class StreamedCompletion:
    """What a response said so far: the text pieces, when each content chunk arrived
    (monotonic ns), whether a choice finished or `[DONE]` came, and the server's usage."""

    __slots__ = (
        "arrivals_ns", "chat", "done", "finished", "pieces", "usage_prompt_tokens", "usage_tokens"
    )  # fmt: skip

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.pieces: list[str] = []
        self.arrivals_ns: list[int] = []
        self.done = False
        self.finished = False
        self.usage_tokens: int | None = None
        self.usage_prompt_tokens: int | None = None
        """The server's `usage.prompt_tokens` (input tokens as it counted them), if given."""

    def add_event(self, data: bytes, arrived_ns: int) -> None:
        """One SSE event's data, read at `arrived_ns`."""
        if data == DONE:
            self.done = True
            return
        self.add_document(_json(data), arrived_ns)

    def add_document(self, document: Any, arrived_ns: int) -> None:
        """One stream chunk, or the whole body of a response that was not streamed."""
        if type(document) is not dict:
            _server_error(document)
            raise StreamError(f"malformed response (not a JSON object): {excerpt(str(document))}")
        if "error" in document:
            _server_error(document)
        usage = document.get("usage")
        if usage:
            self._add_usage(usage)
        for choice in document.get("choices") or ():
            if type(choice) is not dict:
                what = excerpt(str(choice))
                raise StreamError(f"malformed response (a choice is not an object): {what}")
            text = _choice_text(choice, self.chat)
            if text:
                self.pieces.append(text if type(text) is str else str(text))
                self.arrivals_ns.append(arrived_ns)
            if choice.get("finish_reason"):
                self.finished = True

    def _add_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        if isinstance(usage.get("completion_tokens"), int):
            self.usage_tokens = usage["completion_tokens"]
        if isinstance(usage.get("prompt_tokens"), int):
            self.usage_prompt_tokens = usage["prompt_tokens"]

    def check_complete(self) -> None:
        """At the end of a stream: it must have said it was done (`[DONE]`, or a choice with a
        `finish_reason`: `transformers serve` ends so, without `[DONE]`)."""
        if not (self.done or self.finished):
            raise StreamError(
                f"the stream ended without [DONE] or a finish_reason "
                f"({len(self.pieces)} content chunks received)"
            )

    @property
    def tokens(self) -> int:
        """The server's `usage.completion_tokens` when it gave them, else the content chunks."""
        return self.usage_tokens if self.usage_tokens is not None else len(self.pieces)
