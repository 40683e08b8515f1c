"""Each client's error against ground truth: collobench's `http.openai` client (through
`collobench run`) and AIPerf, against a scripted streaming server whose token times are known,
at 1, 8 and 64 concurrent streams.

Prints ONE JSON line on stdout (progress on stderr).

The server is the scripted OpenAI stub (`tests/library/openai_stub.py`), one process for the
whole script, on loopback: the first content chunk `TTFT_MS` after the request's bytes
arrived, then one every `GAP_MS`, `TOKENS` chunks, the stream's end right after the last one;
so TTFT = 25 ms, ITL = 7 ms and latency (request to last token) = 25 + 15 x 7 = 130 ms for
every request. An error is what a client measured - what the script says, in ms (p50 over the
measured requests). The stub also notes when it actually wrote each chunk, and so reports its
own error in the same terms over the same window (`server_*`: its first chunk's lateness, its
write gaps - 7 ms, its last chunk's lateness): that part of a client's error is the server's
(on a busy machine the stub is late too), the rest the client's and the loopback's.

Per round and stream count, collobench then AIPerf (the order alternating round by round,
A B B A ..., so a drift of the machine's load hits both alike), each for `window_s` of a closed
loop after a warm-up of 2 x streams requests (which opens every connection):
- collobench: `collobench run` on a spec whose `external` service is the stub, loadgen
  `closed_loop` (concurrency = streams), stages dataset.prompts -> http.openai (chat,
  max_in_flight = streams); the figures are the `tokens`, `latency` and `stage_breakdown`
  views' (`perf/sql/client_truth.sql`) after loading the run: `stage_ttft` (from the request's
  start), `itl` (pooled chunk gaps), `service` (request start to stream end).
- AIPerf: `aiperf profile --endpoint-type chat --streaming --concurrency S
  --benchmark-duration W --warmup-request-count 2S --use-server-token-count` (so its ITL
  divides by the server's 16 tokens, not its tokenizer's count of the text); the figures are
  its export's p50 of `time_to_first_token`, `inter_token_latency` ((latency - TTFT) /
  (tokens - 1) per request), `inter_chunk_latency` (pooled chunk gaps) and `request_latency`
  (request start to last content chunk). AIPerf is optional: `--aiperf PATH` (default: `aiperf`
  on PATH); without it the line says `skipped` for AIPerf and carries collobench's figures.

Every figure is the median [min, max] over rounds (`perf.common.spread`). The machine is
shared: `background_cpu_pct` says how busy it was over the whole script.

Usage: `python -m perf.client_truth [--aiperf PATH] [--rounds 3] [--window-s 5]
[--streams 1,8,64] [--quick]` (`--quick`: one round of 2 s windows, a smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perf import common
from perf.common import BackgroundLoad, log, report_header, spread, wait_for_quiet
from perf.product_path import run_spec

SCRIPT = "client_truth"
TTFT_MS = 25.0
GAP_MS = 7.0
TOKENS = 16
LATENCY_MS = TTFT_MS + (TOKENS - 1) * GAP_MS
AIPERF_TIMEOUT_S = 300
SQL = Path(__file__).parent / "sql" / "client_truth.sql"

# client -> figure -> (the client's own name for it, what the script says it is)
FIGURES: dict[str, dict[str, tuple[str, float]]] = {
    "collobench": {
        "ttft": ("stage_ttft_p50_ms", TTFT_MS),
        "ttft_from_schedule": ("ttft_p50_ms", TTFT_MS),
        "itl": ("itl_p50_ms", GAP_MS),
        "tpot": ("tpot_p50_ms", GAP_MS),
        "latency": ("service_p50_ms", LATENCY_MS),
        "latency_from_issue": ("from_issue_p50_ms", LATENCY_MS),
        "latency_from_schedule": ("latency_p50_ms", LATENCY_MS),
    },
    "aiperf": {
        "ttft": ("time_to_first_token", TTFT_MS),
        "itl": ("inter_token_latency", GAP_MS),
        "itl_pooled": ("inter_chunk_latency", GAP_MS),
        "latency": ("request_latency", LATENCY_MS),
    },
}
HEADLINE = ("ttft", "itl", "latency")


class Stub:
    """The scripted stub in its own process on a free loopback port."""

    def __init__(self) -> None:
        argv = [sys.executable, "-m", "tests.library.openai_stub", "--ttft-ms", str(TTFT_MS)]
        argv += ["--gap-ms", str(GAP_MS), "--tokens", str(TOKENS)]
        self.process = subprocess.Popen(argv, cwd=common.REPO_ROOT, stdout=subprocess.PIPE)
        assert self.process.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.process.stdout.readline())}"

    def take_lateness(self) -> dict[str, Any]:
        """The server's own error against its script since the last call, in the clients'
        terms (ms, p50): its first chunk's lateness (TTFT), its write gaps - GAP_MS (ITL) and
        its last chunk's lateness (latency); and how many requests it streamed."""
        with urllib.request.urlopen(f"{self.url}/stats/take", timeout=30) as reply:
            stats = json.loads(reply.read())

        def p50_ms(name: str, less_ms: float = 0.0) -> float:
            values = np.array(stats[name], dtype=np.int64) / 1e6
            return round(common.pct(values, 50) - less_ms, 3)

        return {
            "requests": len(stats["first_late_ns"]),
            "ttft": p50_ms("first_late_ns"),
            "itl": p50_ms("write_gap_ns", GAP_MS),
            "latency": p50_ms("last_late_ns"),
        }

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def collobench_spec(url: str, streams: int, window_s: float) -> dict[str, Any]:
    """A closed loop of `streams` clients through http.openai against the stub at `url`."""
    return {
        "name": f"client-truth-{streams}",
        "seed": 0,
        "telemetry": {"gpu": {"enabled": False}},
        "services": [{"name": "stub", "type": "external", "url": url, "ready": {"path": "/stats"}}],
        "pipelines": [
            {
                "name": "chat",
                "loadgen": {
                    "type": "closed_loop",
                    "concurrency": streams,
                    "duration_s": window_s,
                    "warmup_queries": 2 * streams,
                    "timeout_s": 60,
                },
                "stages": [
                    {"id": "prompts", "type": "dataset.prompts", "outputs": ["llm"]},
                    {
                        "id": "llm",
                        "type": "http.openai",
                        "config": {
                            "service": "stub",
                            "api": "chat",
                            "max_tokens": TOKENS,
                            "max_in_flight": streams,
                            "timeout_s": 30,
                        },
                    },
                ],
            }
        ],
    }


def run_collobench(url: str, streams: int, window_s: float, work: Path) -> dict[str, float]:
    """One `collobench run`, loaded into a warehouse of its own; the views' figures."""
    from analysis.warehouse.loader import load_runs
    from analysis.warehouse.reader import connect_read_only

    run_dir = run_spec(collobench_spec(url, streams, window_s), work, "collobench")
    db_path = work / "warehouse.duckdb"
    (loaded,) = load_runs([run_dir], db_path, notify=lambda message: None)
    connection = connect_read_only(db_path, notify=lambda message: None)
    try:
        cursor = connection.execute(SQL.read_text(encoding="utf-8"), {"run_id": loaded.run_id})
        names = [column[0] for column in cursor.description]
        rows = cursor.fetchall()
    finally:
        connection.close()
    if len(rows) != 1:
        raise RuntimeError(f"{run_dir}: {len(rows)} rows of figures for stage llm, not 1")
    return dict(zip(names, rows[0], strict=True))


def aiperf_command(
    aiperf: str, url: str, streams: int, window_s: float, out: Path, tokenizer: str
) -> list[str]:
    """`aiperf profile` for a closed loop of `streams` against the stub, as a user types it."""
    command = [aiperf, "profile", "--url", url, "--endpoint-type", "chat", "--streaming"]
    command += ["--model", "stub", "--tokenizer", tokenizer, "--use-server-token-count"]
    command += ["--concurrency", str(streams), "--benchmark-duration", f"{window_s:g}"]
    command += ["--warmup-request-count", str(2 * streams), "--random-seed", "0"]
    command += ["--synthetic-input-tokens-mean", "64", "--synthetic-input-tokens-stddev", "0"]
    command += ["--output-tokens-mean", str(TOKENS), "--ui", "none", "--no-server-metrics"]
    return [*command, "--output-artifact-dir", str(out)]


def run_aiperf(command: list[str], out: Path) -> dict[str, float]:
    """Run `command` (its own process group, killed whole past AIPERF_TIMEOUT_S); the p50 of
    each metric of its JSON export, and its request count."""
    with open(out.parent / f"{out.name}.log", "w") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            process.wait(timeout=AIPERF_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    export = out / "profile_export_aiperf.json"
    if process.returncode != 0 or not export.exists():
        raise RuntimeError(f"aiperf exited {process.returncode}; its output: {out}.log")
    document = json.loads(export.read_text())
    figures = {name: document[name]["p50"] for name, _ in FIGURES["aiperf"].values()}
    figures["queries"] = document["request_count"]["avg"]
    return figures


def errors(client: str, measured: dict[str, float]) -> dict[str, float]:
    """Measured - scripted for each figure of `client` (ms)."""
    return {
        figure: round(float(measured[name]) - scripted, 3)
        for figure, (name, scripted) in FIGURES[client].items()
    }


def aiperf_version(aiperf: str) -> str | None:
    """The version `aiperf --version` prints, if it does."""
    try:
        done = subprocess.run([aiperf, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or done.stderr.strip()).splitlines()[-1:][0] or None


@dataclass(frozen=True)
class Setup:
    """What every client's run needs: the stub, the window, AIPerf and its tokenizer."""

    url: str
    window_s: float
    aiperf: str | None
    tokenizer: str


def _collobench_round(setup: Setup, streams: int, place: Path) -> dict[str, float]:
    return run_collobench(setup.url, streams, setup.window_s, place)


def _aiperf_round(setup: Setup, streams: int, place: Path) -> dict[str, float]:
    assert setup.aiperf is not None
    command = aiperf_command(
        setup.aiperf, setup.url, streams, setup.window_s, place, setup.tokenizer
    )
    return run_aiperf(command, place)


CLIENTS: dict[str, Callable[[Setup, int, Path], dict[str, float]]] = {
    "collobench": _collobench_round,
    "aiperf": _aiperf_round,
}


def measure(args: argparse.Namespace, aiperf: str | None, work: Path) -> dict[str, Any]:
    """Every round's errors per stream count and client, summarised over rounds."""
    from stages.artifacts.text_artifacts import minilm_package_dir

    stub = Stub()
    setup = Setup(stub.url, args.window_s, aiperf, args.tokenizer or str(minilm_package_dir()))
    order = [client for client in CLIENTS if client != "aiperf" or aiperf is not None]
    rounds: dict[int, dict[str, list[dict[str, float]]]] = {}
    try:
        for number in range(args.rounds):
            for streams in args.streams:
                per_client = rounds.setdefault(streams, {})
                for client in order if number % 2 == 0 else order[::-1]:
                    stub.take_lateness()  # forget the timings of what ran before
                    measured = CLIENTS[client](
                        setup, streams, work / f"r{number}-s{streams}-{client}"
                    )
                    late = stub.take_lateness()
                    figures = {**errors(client, measured), "queries": measured["queries"]}
                    figures.update({f"server_{name}": value for name, value in late.items()})
                    per_client.setdefault(client, []).append(figures)
                    log(SCRIPT, f"round {number} streams {streams} {client}: {json.dumps(figures)}")
    finally:
        stub.stop()
    return {str(streams): summarise(per_client) for streams, per_client in rounds.items()}


def summarise(per_client: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Per client: each figure's median [min, max] over rounds."""
    return {
        client: {name: spread([run[name] for run in runs], 3) for name in runs[0]}
        for client, runs in per_client.items()
    }


def headline(streams: dict[str, Any]) -> dict[str, Any]:
    """Per stream count and client: the median error of TTFT, ITL and latency p50 (ms), and
    the server's own share of it over the same windows."""
    return {
        count: {
            client: {
                **{figure: figures[figure]["median"] for figure in HEADLINE},
                "server": {figure: figures[f"server_{figure}"]["median"] for figure in HEADLINE},
            }
            for client, figures in clients.items()
        }
        for count, clients in streams.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--aiperf", default="aiperf", help="the aiperf executable (path or name)")
    parser.add_argument("--tokenizer", help="a tokenizer folder for AIPerf (default: minilm's)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=5.0)
    parser.add_argument(
        "--streams", type=lambda text: [int(part) for part in text.split(",")], default=[1, 8, 64]
    )
    parser.add_argument("--quick", action="store_true", help="one round of 2 s windows")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.window_s = 1, 2.0
    aiperf = shutil.which(args.aiperf)
    skipped = None if aiperf else f"aiperf: no executable {args.aiperf!r} (give --aiperf PATH)"
    if skipped:
        log(SCRIPT, f"{skipped}; collobench alone")
    waited_s = wait_for_quiet(SCRIPT, 10 if args.quick else 30)
    started = time.monotonic()
    with BackgroundLoad() as background, tempfile.TemporaryDirectory(prefix=SCRIPT) as work:
        streams = measure(args, aiperf, Path(work))
    header = report_header(
        SCRIPT, "quick" if args.quick else "full", waited_s, {"all": background.pct}
    )
    result: dict[str, Any] = {
        **header,
        "script": {
            "ttft_ms": TTFT_MS,
            "gap_ms": GAP_MS,
            "tokens": TOKENS,
            "latency_ms": LATENCY_MS,
        },
        "method": "error = measured p50 - scripted (ms), median [min, max] over rounds; "
        "collobench then AIPerf per round and stream count, the order alternating",
        "rounds": args.rounds,
        "window_s": args.window_s,
        "aiperf": {"executable": aiperf, "version": aiperf_version(aiperf) if aiperf else None},
        "error_p50_ms": headline(streams),
        "streams": streams,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    if skipped:
        result["skipped"] = skipped
    print(json.dumps(result))


if __name__ == "__main__":
    main()
