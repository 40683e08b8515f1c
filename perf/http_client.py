"""How many concurrent streams, and how many tokens per second, one `http.openai` stage reads
with its per-token timestamps still right; beside a bare asyncio client doing the same (the floor).

Prints ONE JSON line on stdout (progress on stderr).

Set-up: the scripted stub server (`tests/library/openai_stub.py`) runs in its own process,
pinned to the last CPU; this process (the client) is pinned to CPU 0, so the client has one core.
Each of S users opens its connection with one warm-up request (not measured), then, its start
offset by its number x span / S (span = one request's scripted duration, ttft + tokens x gap:
the phases of independent users, not lockstep), issues
streamed completions back to back for the window; the collector's generations are frozen over
the window, as the runtime does (stages.runtime.driver.run_load). The stub sends each
request's first token `ttft_ms` (5) after reading it, then one every `gap_ms` (32 tokens per
request), and notes when it wrote each chunk (`time.monotonic_ns()`, the clock the client
stamps arrivals with). A token's timestamp error = |the client's arrival stamp - the stub's
write time| (the loopback transit plus the client's lateness in reading, or the stub's
lateness in stamping when it was descheduled). tokens/s = measured tokens / (last measured
arrival - first).

1. Capacity: S in a rising ladder at a realistic decode pace (`gap_ms` 20, 50 tokens/s per
   stream); per S, tokens/s received and the timestamp error's p50/p99. A client's figure is
   the largest S whose p99 error is <= 1 ms (target for the stage: >= 500 streams).
2. Throughput: 64 streams with no gap between tokens (the stub sends as fast as it can, on its
   own core): tokens per second received, the stage against the bare client (target >= 0.8x).
   When the stub is the bottleneck both read the same rate: the ratio is then a lower bound.

The stage side is `OpenAIStage` itself (`start_async`, `run_async` per request, token rows to
a list as (query_id, ts_ns) tuples), on one event loop as the runtime's async stage thread
runs it, without the runtime's per-visit recording (its cost is per request, not per token:
perf/stage_overhead.py). The bare client: one `asyncio.open_connection` per stream, kept alive;
it writes the request, reads with `StreamReader.read`, stamps each read, splits lines and
decodes each `data:` line's JSON: the least work that yields the same timestamps and text.

The machine is shared: `background_cpu_pct` says how busy it was; a busy neighbour shows as
millisecond p99 errors on both clients.

`--quick`: 2 s windows, a ladder of 200, 500, 1000 (~1 min in all).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from perf import common
from perf.common import BackgroundLoad, log, pct, report_header, wait_for_quiet
from stages.library.served.openai_http import OpenAIConfig, OpenAIStage
from stages.runtime.query import Query
from stages.runtime.stage import StageContext

SCRIPT = "http_client"
LAG_LIMIT_NS = 1_000_000
TOKENS = 32
TTFT_MS = 5.0


class Stub:
    """The stub server in its own process, pinned to the last CPU."""

    def __init__(self, gap_ms: float, tokens: int) -> None:
        cpu = max(0, (os.cpu_count() or 1) - 1)
        argv = [sys.executable, "-m", "tests.library.openai_stub", "--ttft-ms", str(TTFT_MS)]
        argv += ["--gap-ms", str(gap_ms), "--tokens", str(tokens), "--cpu", str(cpu)]
        self.gap_ms, self.tokens = gap_ms, tokens
        self.process = subprocess.Popen(argv, cwd=common.REPO_ROOT, stdout=subprocess.PIPE)
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())
        self.url = f"http://127.0.0.1:{self.port}"

    async def take_stats(self) -> dict[str, Any]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(b"GET /stats/take HTTP/1.1\r\nHost: stub\r\nContent-Length: 0\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        body = await reader.readexactly(length)
        writer.close()
        return dict(json.loads(body))

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


async def _stage_streams(
    url: str, streams: int, window_s: float, spread_s: float
) -> dict[str, list[int]]:
    """Run S users through one OpenAIStage; prompt -> arrival stamps of its content chunks."""
    # The rows as (query_id, ts_ns) tuples, which the collector stops tracking: the runtime's
    # recorder hands rows to its writer thread and lets them go; a list of dicts kept here
    # would make every full collection walk them, a pause the runtime does not have.
    rows: list[tuple[int, int]] = []

    def keep(_: str, batch: list[dict[str, Any]]) -> None:
        rows.extend([(row["query_id"], row["ts_ns"]) for row in batch])

    context = StageContext(stage_id="llm", write_rows=keep)
    config = OpenAIConfig(base_url=url, max_in_flight=streams, timeout_s=60, max_tokens=TOKENS)
    stage = OpenAIStage(config, context)
    stage.prepare()
    await stage.start_async()
    prompts: dict[int, str] = {}

    async def one(number: int, request: int) -> None:
        query_id = number * 1_000_000 + request
        prompts[query_id] = prompt = f"s{number}.{request}"
        query = Query(query_id, 0, payload={"prompt": prompt}, stage_count=1)
        query.visits[0] = 1
        await stage.run_async(query)

    await _users(streams, window_s, spread_s, one)
    await stage.stop_async()
    arrivals: dict[str, list[int]] = {}
    for query_id, ts_ns in rows:
        arrivals.setdefault(prompts[query_id], []).append(ts_ns)
    return arrivals


async def _users(
    streams: int, window_s: float, spread_s: float, one: Callable[[int, int], Awaitable[None]]
) -> None:
    """S users: each opens its connection with a warm-up request (request 0, not measured),
    then, its start offset by number x spread_s (phases spread in time, not in lockstep),
    issues requests back to back until the window ends. The collector's generations are
    frozen over the window, as the runtime does (stages.runtime.driver.run_load)."""
    await asyncio.gather(*(one(number, 0) for number in range(streams)))
    gc.collect()
    gc.freeze()
    deadline = time.monotonic() + window_s

    async def user(number: int) -> None:
        await asyncio.sleep(number * spread_s)
        request = 1
        while time.monotonic() < deadline:
            await one(number, request)
            request += 1

    try:
        await asyncio.gather(*(user(number) for number in range(streams)))
    finally:
        gc.unfreeze()


async def _bare_streams(
    port: int, streams: int, window_s: float, spread_s: float
) -> dict[str, list[int]]:
    """The floor: S users, each one kept-alive connection, the least parsing that gives the
    same stamps."""
    arrivals: dict[str, list[int]] = {}
    connections: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}

    async def one(number: int, request: int) -> None:
        if number not in connections:
            connections[number] = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = connections[number]
        prompt = f"b{number}.{request}"
        body = json.dumps(
            {"prompt": prompt, "max_tokens": TOKENS, "stream": True,
             "stream_options": {"include_usage": True}}
        ).encode()  # fmt: skip
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: stub\r\nContent-Type: application/json"
            b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        arrivals[prompt] = await _bare_response(reader)

    await _users(streams, window_s, spread_s, one)
    for _, writer in connections.values():
        writer.close()
    return arrivals


async def _bare_response(reader: asyncio.StreamReader) -> list[int]:
    """One streamed response: the arrival stamp of each content chunk; it ends at the chunked
    body's terminator after `[DONE]`."""
    stamps: list[int] = []
    await reader.readuntil(b"\r\n\r\n")
    pending, recent, done = b"", b"", False
    while True:
        chunk = await reader.read(65536)
        now_ns = time.monotonic_ns()
        if not chunk:
            raise ConnectionError("the stub closed the connection")
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            if line.startswith(b"data: "):
                if line[6:] == b"[DONE]":
                    done = True
                    continue
                for choice in json.loads(line[6:])["choices"]:
                    if choice.get("text"):
                        stamps.append(now_ns)
        recent = (recent + chunk)[-5:]
        if done and recent == b"0\r\n\r\n":
            return stamps


def _measure(client: str, stub: Stub, streams: int, window_s: float) -> dict[str, Any]:
    """One run of S streams: tokens/s and the timestamp error against the stub's writes, over
    the measured requests (not the warm-up ones)."""
    # Users' phases spread over one request's span, as independent users' would be; spread
    # over one token gap only, every stream's request boundary falls in the same 20 ms, and
    # the burst of S request ends and starts is what the p99 then measures.
    spread_s = (TTFT_MS + stub.tokens * stub.gap_ms) / 1e3 / streams

    async def run() -> tuple[dict[str, list[int]], dict[str, Any]]:
        if client == "stage":
            arrivals = await _stage_streams(stub.url, streams, window_s, spread_s)
        else:
            arrivals = await _bare_streams(stub.port, streams, window_s, spread_s)
        return arrivals, await stub.take_stats()

    arrivals, stats = asyncio.run(run())
    measured = {prompt: stamps for prompt, stamps in arrivals.items() if not prompt.endswith(".0")}
    lags = [
        got - sent
        for prompt, stamps in measured.items()
        for got, sent in zip(stamps, stats["sent_ns"][prompt], strict=True)
    ]
    first_ns = min(stamps[0] for stamps in measured.values())
    elapsed_s = (max(stamps[-1] for stamps in measured.values()) - first_ns) / 1e9
    lag = np.array(lags, dtype=np.int64)
    tokens = int(lag.size)
    return {
        "client": client,
        "streams": streams,
        "tokens": tokens,
        "tokens_per_s": round(tokens / elapsed_s),
        "lag_p50_us": round(pct(lag, 50) / 1e3, 1),
        "lag_p99_us": round(pct(lag, 99) / 1e3, 1),
        "abs_lag_p99_us": round(pct(np.abs(lag), 99) / 1e3, 1),
        "connections": stats["connections"],
    }


def _ladder(stub: Stub, ladder: list[int], window_s: float) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for client in ("stage", "bare"):
        points = []
        for streams in ladder:
            point = _measure(client, stub, streams, window_s)
            log(SCRIPT, json.dumps(point))
            points.append(point)
        within = [p for p in points if p["abs_lag_p99_us"] * 1e3 <= LAG_LIMIT_NS]
        best = max(within, key=lambda p: p["streams"]) if within else None
        found[client] = {"points": points, "most_streams_within_1ms_p99": best}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short windows, a short ladder")
    args = parser.parse_args()
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    window_s = 2.0 if args.quick else 5.0
    ladder = [200, 500, 1000] if args.quick else [100, 200, 500, 1000, 1500, 2000]
    waited_s = wait_for_quiet(SCRIPT, 10 if args.quick else 30)
    result: dict[str, Any] = {}
    with BackgroundLoad() as background:
        paced = Stub(gap_ms=20.0, tokens=TOKENS)
        try:
            result["capacity"] = {
                "gap_ms": 20.0,
                "tokens_per_request": TOKENS,
                **_ladder(paced, ladder, window_s),
            }
        finally:
            paced.stop()
        flat_out = Stub(gap_ms=0.0, tokens=64)
        try:
            stage = _measure("stage", flat_out, 64, window_s)
            bare = _measure("bare", flat_out, 64, window_s)
        finally:
            flat_out.stop()
    ratio = stage["tokens_per_s"] / max(1, bare["tokens_per_s"])
    result["throughput"] = {
        "gap_ms": 0.0,
        "stage": stage,
        "bare": bare,
        "stage_over_bare": round(ratio, 2),
    }
    header = report_header(
        SCRIPT, "quick" if args.quick else "full", waited_s, {"all": background.pct}
    )
    print(json.dumps({**header, **result}))


if __name__ == "__main__":
    main()
