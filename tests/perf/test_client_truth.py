"""perf/client_truth.py: errors are measured - scripted, summarised per client over rounds with
the server's own share; the collobench spec is a valid spec; the AIPerf command asks for what
its figures need; and the stub reports how it kept its script (the ground truth's own error)
and names its chunks as real servers do (AIPerf reads no chunk without `object`)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from perf import client_truth
from stages.validation.loading import validate_document
from tests.library.openai_calibration import make_query
from tests.library.openai_stub import Script, StubServer, ThreadedStub
from tests.library.served.test_openai_http import make_stage


def test_errors_are_measured_minus_scripted() -> None:
    measured = {
        "time_to_first_token": 27.5,
        "inter_token_latency": 7.25,
        "inter_chunk_latency": 0.0,
        "request_latency": 130.0,
    }
    assert client_truth.errors("aiperf", measured) == {
        "ttft": 2.5,
        "itl": 0.25,
        "itl_pooled": -7.0,
        "latency": 0.0,
    }


def test_headline_is_each_clients_median_over_rounds_with_the_servers_share() -> None:
    def run(ttft: float, server_ttft: float) -> dict[str, float]:
        return {"ttft": ttft, "itl": 0.1, "latency": 2 * ttft, "server_ttft": server_ttft,
                "server_itl": 0.0, "server_latency": 0.5}  # fmt: skip

    rounds = {"8": client_truth.summarise({"aiperf": [run(9, 1), run(3, 2), run(5, 3)]})}
    assert rounds["8"]["aiperf"]["ttft"] == {"median": 5, "min": 3, "max": 9}
    assert client_truth.headline(rounds) == {
        "8": {
            "aiperf": {
                "ttft": 5,
                "itl": 0.1,
                "latency": 10,
                "server": {"ttft": 2, "itl": 0.0, "latency": 0.5},
            }
        }
    }


def test_the_collobench_side_is_a_closed_loop_spec_on_the_external_stub() -> None:
    loaded = validate_document(client_truth.collobench_spec("http://127.0.0.1:9", 8, 5.0))
    (pipeline,) = loaded.spec.pipelines
    assert (pipeline.loadgen.type, pipeline.loadgen.concurrency) == ("closed_loop", 8)
    assert loaded.spec.services[0].type == "external"


def test_the_aiperf_command_divides_by_the_servers_tokens_over_the_same_window() -> None:
    command = client_truth.aiperf_command("aiperf", "http://h:1", 8, 5.0, Path("out"), "tok")
    joined = " ".join(command)
    assert "--use-server-token-count" in command and "--streaming" in command
    assert "--concurrency 8 --benchmark-duration 5 --warmup-request-count 16" in joined


def test_the_stub_reports_how_it_kept_its_script() -> None:
    script = Script(ttft_ms=2.0, gap_ms=1.0, tokens=5)
    with ThreadedStub(script) as stub:
        stage = make_stage(base_url=stub.url, api="chat")
        stage.run(make_query(1))
        stage.run(make_query(2))
        with urllib.request.urlopen(f"{stub.url}/stats/take", timeout=10) as reply:
            taken = json.loads(reply.read())
        with urllib.request.urlopen(f"{stub.url}/stats", timeout=10) as reply:
            after = json.loads(reply.read())
    lengths = {name: len(taken[name]) for name in ("first_late_ns", "last_late_ns", "write_gap_ns")}
    assert lengths == {"first_late_ns": 2, "last_late_ns": 2, "write_gap_ns": 8}
    assert all(gap > 0 for gap in taken["write_gap_ns"])
    assert after["first_late_ns"] == after["write_gap_ns"] == []  # taken: forgotten


def test_the_stubs_chunks_carry_the_object_real_servers_name_them_by() -> None:
    assert b'"object": "chat.completion.chunk"' in StubServer._content(True, "hi", None)
    assert b'"object": "text_completion"' in StubServer._content(False, "hi", None)
