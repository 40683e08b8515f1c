"""The calibration client of test_openai_http's 200-stream timestamp test: one `http.openai`
stage, 200 streams at once against the stub (in its own process), the p99 of |arrival stamp -
stub's write|, of the inter-token gap errors and of the TTFT errors, printed as one JSON line in
microseconds. Run as `python -m tests.library.openai_calibration` from the repository root, in
a process of its own."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np

from stages.library.served.openai_http import OpenAIConfig, OpenAIStage
from stages.runtime.query import Query
from stages.runtime.stage import StageContext
from tests.helpers import REPO


def make_query(query_id: int = 7, payload: Any = None, visit: int = 1) -> Query:
    """A query on its `visit`-th visit to a one-stage pipeline, prompt `q<id>` by default (the
    stage tests use it too)."""
    query = Query(query_id, 0, stage_count=1, payload=payload or {"prompt": f"q{query_id}"})
    query.visits[0] = visit
    return query


def _calibration_errors_us() -> dict[str, float]:
    """p99 of |arrival - write|, of the inter-token gap errors and of the TTFT errors, in us."""
    argv = [sys.executable, "-m", "tests.library.openai_stub", "--ttft-ms", "20", "--gap-ms",
            "20", "--tokens", "20"]  # fmt: skip
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        # The stub on a core of its own and the client on the others: left to the scheduler, the
        # client shares the stub's core often enough to fail one attempt in two (8 runs each).
        argv += ["--cpu", str(cpus[-1])]
        os.sched_setaffinity(0, cpus[:-1])
    stub = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE)
    try:
        assert stub.stdout is not None
        url = f"http://127.0.0.1:{int(stub.stdout.readline())}"
        written: list[tuple[int, int]] = []  # tuples the collector stops tracking

        def keep(_: str, batch: list[dict[str, Any]]) -> None:
            written.extend([(row["query_id"], row["ts_ns"]) for row in batch])

        config = OpenAIConfig(base_url=url, max_in_flight=200, timeout_s=30)
        stage = OpenAIStage(config, StageContext(stage_id="llm", write_rows=keep))
        stage.prepare()
        started = asyncio.run(_two_hundred_at_once(stage))
        stats = asyncio.run(_stats(url))
    finally:
        stub.kill()
        stub.wait()
    arrived: dict[int, list[int]] = {}
    for query_id, ts_ns in written:
        if query_id < 1000:  # not the warm-up round
            arrived.setdefault(query_id, []).append(ts_ns)
    assert sorted(arrived) == list(range(200)) and len(started) == 200
    lags, gap_errors, ttft_errors = [], [], []
    for query_id, stamps in arrived.items():
        sent, read_ns = stats["sent_ns"][f"q{query_id}"], stats["read_ns"][f"q{query_id}"]
        assert len(stamps) == len(sent) == 20
        lags += [abs(got - wrote) for got, wrote in zip(stamps, sent, strict=True)]
        gap_errors += list(np.abs(np.diff(stamps) - np.diff(sent)))
        # The client's TTFT from its send, against the stub's from its read of the request.
        ttft_errors.append(abs((stamps[0] - started[query_id]) - (sent[0] - read_ns)))
    return {
        name: round(float(np.percentile(values, 99)) / 1e3, 1)
        for name, values in (("lag", lags), ("gap", gap_errors), ("ttft", ttft_errors))
    }


SPREAD_S = 0.0001


async def _two_hundred_at_once(stage: OpenAIStage) -> dict[int, int]:
    """A warm-up round opens the 200 connections (as a service's warm-up would), then 200
    requests at once on them; when each was sent."""
    await stage.start_async()
    warm_up = (make_query(1000 + query_id) for query_id in range(200))
    await asyncio.gather(*(stage.run_async(query) for query in warm_up))
    gc.collect()
    gc.freeze()  # as the runtime does for a measured window (stages.runtime.driver.run_load)
    started: dict[int, int] = {}

    async def one(query_id: int) -> None:
        await asyncio.sleep(query_id * SPREAD_S)
        started[query_id] = time.monotonic_ns()
        await stage.run_async(make_query(query_id))

    try:
        await asyncio.gather(*(one(query_id) for query_id in range(200)))
    finally:
        gc.unfreeze()
    await stage.stop_async()
    return started


async def _stats(url: str) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /stats HTTP/1.1\r\nHost: stub\r\nContent-Length: 0\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    document = json.loads(await reader.readexactly(length))
    writer.close()
    return dict(document)


if __name__ == "__main__":
    print(json.dumps(_calibration_errors_us()))
