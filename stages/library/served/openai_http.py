"""`http.openai`: a client of an OpenAI-compatible server (`/v1/completions`,
`/v1/chat/completions`), streamed (SSE) or not, many requests in flight on the stage's loop.

Connections: one pool of keep-alive connections per stage instance
(`stages.library.served.http_wire`, a minimal HTTP/1.1 client on asyncio), made in `start_async`
and closed in `stop_async` on the stage's event loop. A streamed response is read as it arrives,
each received segment stamped with `time.monotonic_ns()` when the socket gave it, and its SSE
events parsed by `stages.library.served.stream` with a bound on an event's size.
Every failure (HTTP status >= 400, timeout, refused connection, malformed or truncated stream)
raises `OpenAIRequestError` with a one-line reason: the runtime records an `error` row and the
reason in `errors`. The API key (`api_key_env`) is sent, and is never in a reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from stages.library.served.http_wire import ConnectionPool, HttpError, Response
from stages.library.served.request_shape import (
    EnforceOutput,
    TokenMismatch,
    asked_output,
    mismatch,
    output_fields,
    unchecked_input,
)
from stages.library.served.session import run_session, session_turns
from stages.library.served.stream import (
    OpenAIRequestError,
    SseReader,
    StreamedCompletion,
    StreamError,
    excerpt,
)
from stages.library.text.payloads import PROMPT_FIELD, as_dict, prompt_texts
from stages.runtime.async_stage import AsyncStage, AsyncStageConfig
from stages.runtime.query import Query
from stages.runtime.stage import Route

MAX_EVENT_BYTES = 1 << 20
"""The largest SSE line or event accepted (1 MiB); a larger one fails the visit, unbuffered."""
MAX_BODY_BYTES = 16 << 20
"""The largest body of a response that is not streamed (16 MiB)."""
ERROR_BODY_BYTES = 512
"""How much of an error response's body is read for its reason."""

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


class OpenAIConfig(AsyncStageConfig):
    service: str | None = Field(
        None,
        description="A service of this spec (`services[].name`): the stage calls the URL it "
        "listens on. Give this or `base_url`.",
    )
    base_url: str | None = Field(
        None,
        description="The server's root URL (`http://127.0.0.1:8000`; a trailing `/v1` is "
        "accepted) when it is not a service of the spec. Give this or `service`.",
    )
    api: Literal["completions", "chat"] = Field(
        "completions",
        description="completions: POST /v1/completions with `prompt`; chat: POST "
        "/v1/chat/completions with one user message.",
    )
    model: str | None = Field(
        None,
        description="The request's `model`; null leaves it out, and a server serving one model "
        "(`transformers serve MODEL`, vLLM, SGLang) uses that one.",
    )
    max_tokens: int = Field(
        16,
        ge=1,
        le=1_000_000,
        description="`max_tokens` of each request; a payload's `output_tokens` "
        "(dataset.synthetic_prompts, a trace) replaces it for its request.",
    )
    enforce_output: EnforceOutput = Field(
        "off",
        description="Make the server generate exactly max_tokens (the payload's "
        "`output_tokens` or `max_tokens`): off (max_tokens only: the model may stop early); "
        "min_tokens (also `min_tokens` = max_tokens and `ignore_eos`: vLLM, SGLang); "
        "generation_config (a `generation_config` with min_new_tokens = max_new_tokens: "
        "`transformers serve`, which refuses unknown fields such as min_tokens).",
    )
    on_token_mismatch: TokenMismatch = Field(
        "fail",
        description="When the server's usage differs from what the payload asked (its "
        "`input_tokens` counted for this api; the output length when enforced): fail (the "
        "visit fails with the difference as its reason, in `errors` and the summary; its row "
        "keeps tokens and prompt_tokens) or record (only the row's figures). With fail, an "
        "`input_tokens` counted otherwise than this api counts is not checked: a "
        "`stage_warning` of the run says how many visits.",
    )
    min_tokens: int | None = Field(
        None, ge=0, description="`min_tokens` (vLLM, SGLang); sent only when set."
    )
    ignore_eos: bool | None = Field(
        None,
        description="`ignore_eos` (vLLM, SGLang: generate max_tokens whatever the text); sent "
        "only when set.",
    )
    temperature: float | None = Field(
        None, ge=0, le=100, description="`temperature`; null leaves the server's default."
    )
    stream: bool = Field(
        True,
        description="Stream the response (SSE): each token chunk's arrival is recorded; with "
        "`stream_options.include_usage` the server's token count too.",
    )
    timeout_s: float = Field(
        60.0, gt=0, le=86_400, description="Seconds a whole request may take, reading included."
    )
    api_key_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The NAME of an environment variable whose value is sent as `Authorization: "
        "Bearer`; the value is never recorded.",
    )
    text_field: str = Field(PROMPT_FIELD, description="Payload field holding the prompt text.")
    use_documents: bool = Field(
        True,
        description="When the payload carries retrieved `documents`, put their texts before "
        "the prompt as context (a RAG prompt).",
    )

    @model_validator(mode="after")
    def _one_target(self) -> OpenAIConfig:
        if (self.service is None) == (self.base_url is None):
            raise ValueError("give exactly one of service and base_url")
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http:// or https:// URL, not {self.base_url!r}")
        if self.enforce_output != "off" and (self.min_tokens, self.ignore_eos) != (None, None):
            raise ValueError("enforce_output sets the output length: leave min_tokens and "
                             "ignore_eos unset")  # fmt: skip
        return self

    def prompt_api(self) -> str:
        """The API the prompts go over: a prompt builder upstream counts its tokens for it."""
        return self.api


def _root_url(url: str) -> str:
    root = url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


class OpenAIStage(AsyncStage[OpenAIConfig]):
    """Sends ONE QUERY's prompt (the payload's `text_field`, with retrieved documents as
    context) to an OpenAI-compatible server and waits for the whole answer. Records
    `first_token_ns` (the first content chunk's arrival; for a response not streamed, the
    body's), `tokens` (the server's `usage.completion_tokens`, else the content chunks),
    `prompt_tokens` (the server's `usage.prompt_tokens`) and, streamed, one `token_events` row
    per content chunk. A payload's `output_tokens` sets the request's max_tokens; a payload's
    `turns` makes the visit a multi-turn session (stages.library.served.session). Payload out:
    the input's fields plus `text` and `new_tokens`."""

    records_outcome = True

    def prepare(self) -> None:
        config = self.config
        if config.service is not None:
            urls = self.context.service_urls
            if config.service not in urls:
                known = ", ".join(sorted(urls)) or "none"
                raise ValueError(
                    f"service {config.service!r} is not a service that is up (up: {known})"
                )
            root = _root_url(urls[config.service])
        else:
            root = _root_url(str(config.base_url))
        self.url = root + ENDPOINTS[config.api]
        self.headers = {"Content-Type": "application/json"}
        self._secret: str | None = None
        if config.api_key_env is not None:
            secret = os.environ.get(config.api_key_env)
            if not secret:
                raise ValueError(
                    f"api_key_env: the environment variable {config.api_key_env} is not set"
                )
            self._secret = secret
            self.headers["Authorization"] = f"Bearer {secret}"
        self.request_fields = self._request_fields()
        self._pool: ConnectionPool | None = None

    def _request_fields(self) -> dict[str, Any]:
        """The fields every request carries besides the prompt."""
        config = self.config
        fields = output_fields(config.max_tokens, config.enforce_output)
        fields["stream"] = config.stream
        optional = {
            "model": config.model,
            "min_tokens": config.min_tokens,
            "ignore_eos": config.ignore_eos,
            "temperature": config.temperature,
        }
        fields.update({key: value for key, value in optional.items() if value is not None})
        if config.stream:
            fields["stream_options"] = {"include_usage": True}
        return fields

    async def start_async(self) -> None:
        self._pool = ConnectionPool(self.url)
        target = urlsplit(self.url).path
        fixed = [f"POST {target} HTTP/1.1", f"Host: {self._pool.host_header.decode()}"]
        fixed += [f"{name}: {value}" for name, value in self.headers.items()]
        self._head_start = ("\r\n".join(fixed) + "\r\nContent-Length: ").encode("latin-1")

    async def stop_async(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def run(self, query: Query) -> Route:
        """One visit outside the runtime: the pool is made and closed around it."""

        async def visit() -> Route:
            await self.start_async()
            try:
                return await self.run_async(query)
            finally:
                await self.stop_async()

        return asyncio.run(visit())

    def _body(self, prompt: str, output_tokens: int | None) -> bytes:
        fields = dict(self.request_fields)
        if output_tokens is not None:
            fields.update(output_fields(output_tokens, self.config.enforce_output))
        if self.config.api == "chat":
            fields["messages"] = [{"role": "user", "content": prompt}]
        else:
            fields["prompt"] = prompt
        return json.dumps(fields).encode()

    async def run_async(self, query: Query) -> Route:
        visit = query.visits[self.context.stage_index]
        payload = as_dict(query.payload, self.config.text_field)
        turns = session_turns(payload)
        if turns is not None:  # a multi-turn session (stages.library.served.session)
            if self.config.api != "chat":
                raise ValueError("a session's turns carry their history: use api: chat")
            await run_session(self, query, payload, turns)
            query.payload = payload
            return None
        texts, batched = prompt_texts(payload, self.config.text_field, self.config.use_documents)
        if batched:
            raise ValueError(f"one prompt per query, got a list of {len(texts)}")
        completion = StreamedCompletion(self.config.api == "chat")
        output_tokens = asked_output(payload)
        try:
            async with asyncio.timeout(self.config.timeout_s):
                await self.request(self._body(texts[0], output_tokens), completion)
        except TimeoutError:
            raise OpenAIRequestError(
                f"{self.url}: no complete response within timeout_s {self.config.timeout_s:g}"
                f" ({len(completion.pieces)} content chunks received)"
            ) from None
        except (StreamError, OSError) as error:
            raise OpenAIRequestError(self.reason(error)) from None
        self._record(query, visit, completion)
        self._check_shape(payload, output_tokens, query)
        payload["text"] = "".join(completion.pieces)
        payload["new_tokens"] = query.tokens
        query.payload = payload
        return None

    def _check_shape(
        self, payload: dict[str, Any], output_tokens: int | None, query: Query
    ) -> None:
        """Fail the visit (on_token_mismatch fail) when the server's usage differs from what
        the payload asked; the row keeps the figures either way."""
        if self.config.on_token_mismatch != "fail":
            return
        self.warn_unchecked(payload)
        enforced = output_tokens or self.config.max_tokens
        problem = mismatch(
            payload,
            self.config.api,
            enforced if self.config.enforce_output != "off" else None,
            query.prompt_tokens,
            query.tokens,
        )
        if problem is not None:
            raise OpenAIRequestError(f"{self.url}: {problem}")

    def warn_unchecked(self, payload: dict[str, Any]) -> None:
        """A payload's input count that cannot be checked over this API is a warning of the
        run (`StageContext.warn`), never skipped silently."""
        if (skipped := unchecked_input(payload, self.config.api)) is not None:
            self.context.warn(skipped)

    def reason(self, error: Exception) -> str:
        """One line, without the API key whatever the error's text holds."""
        own = isinstance(error, StreamError | HttpError)
        text = str(error) if own else f"{type(error).__name__}: {error}"
        text = f"{self.url}: {excerpt(text)}"
        return text.replace(self._secret, "***") if self._secret else text

    async def request(self, body: bytes, completion: StreamedCompletion) -> None:
        assert self._pool is not None, "start_async makes the connection pool"
        head = self._head_start + b"%d\r\n\r\n" % len(body)
        response = await self._pool.request(head, body)
        complete = False
        try:
            if response.status >= 400:
                start = await _read_start(response, ERROR_BODY_BYTES)
                raise StreamError(f"HTTP {response.status}: {excerpt(start)}")
            if self.config.stream:
                await _read_stream(response, completion)
            else:
                document = await _read_body(response)
                completion.add_document(document, time.monotonic_ns())
            complete = True
        finally:
            self._pool.release(response, complete)

    def _record(self, query: Query, visit: int, completion: StreamedCompletion) -> None:
        arrivals = completion.arrivals_ns
        query.first_token_ns = arrivals[0] if arrivals else None
        # Not streamed, the body is one chunk: only the server's usage counts tokens.
        query.tokens = completion.tokens if self.config.stream else completion.usage_tokens
        query.prompt_tokens = completion.usage_prompt_tokens
        if not self.config.stream or not arrivals:
            return
        stage, query_id = self.context.stage_id, query.query_id
        rows = [
            {"query_id": query_id, "stage": stage, "visit": visit, "token_index": index,
             "ts_ns": ts_ns}
            for index, ts_ns in enumerate(arrivals)
        ]  # fmt: skip
        self.context.write_rows("token_events", rows)


async def _read_stream(response: Response, completion: StreamedCompletion) -> None:
    """Parse a streamed response as it arrives; events carry their segment's arrival time."""
    reader = SseReader(MAX_EVENT_BYTES)
    feed, add_event, piece = reader.feed, completion.add_event, response.piece_nowait
    connection = response.connection
    while (data := piece()) is not None:
        if not data:
            await connection.arrival()
            continue
        arrived_ns = connection.stamp_ns
        for event in feed(data):
            add_event(event, arrived_ns)
    completion.check_complete()


async def _read_start(response: Response, limit: int) -> bytes:
    """Up to `limit` bytes of the body (an error's reason)."""
    parts: list[bytes] = []
    size = 0
    while size < limit and (data := await response.piece()) is not None:
        parts.append(data)
        size += len(data)
    return b"".join(parts)[:limit]


async def _read_body(response: Response) -> Any:
    """A whole JSON body, refused past `MAX_BODY_BYTES`."""
    parts: list[bytes] = []
    size = 0
    while (data := await response.piece()) is not None:
        size += len(data)
        if size > MAX_BODY_BYTES:
            raise StreamError(f"the response body exceeds {MAX_BODY_BYTES} bytes")
        parts.append(data)
    body = b"".join(parts)
    try:
        return json.loads(body)
    except ValueError:
        raise StreamError(f"the response is not JSON: {excerpt(body)!r}") from None
