"""The Dagster UI in a real browser: `dagster dev` on a loopback port over the instance the
session's demo materialised (`demo_run`: artefact, benchmark, warehouse and reports of
partition `tiny`), and Debian's chromium, headless, renders the asset catalog, the asset
lineage, the latency report asset and the benchmark run's page. Each page's DOM (after a
virtual-time budget) must show the assets and the report; each screenshot is saved under the
test's tmp folder. Chromium and dagster dev are ended by process group; none is left.

chromium comes from `apt-get install chromium` (`make test` installs it when missing); where
it is missing the test is skipped, unless $COLLOBENCH_REQUIRE_CHROMIUM=1 (CI), where it fails.
Only --dump-dom and --screenshot are used: websocket-client (for the DevTools protocol) and
Selenium are not in the environment.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import psutil
import pytest

from stages.process_groups import end_group
from tests.dagster import server
from tests.dagster.demo_run import DemoRun

pytestmark = [pytest.mark.slow, pytest.mark.spawns]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1600",  # every asset row rendered (the list draws what fits)
    "--virtual-time-budget=15000",
]
PAGE_TIMEOUT_S = 120


@pytest.fixture(scope="module", autouse=True)
def _need_chromium() -> None:
    if not Path(CHROMIUM).is_file():
        message = "chromium is not installed (apt-get install chromium)"
        if os.environ.get("COLLOBENCH_REQUIRE_CHROMIUM") == "1":
            pytest.fail(message)
        pytest.skip(message)


@dataclass(frozen=True)
class Ui:
    base_url: str
    demo: DemoRun


@pytest.fixture
def ui(demo_run: DemoRun, tmp_path: Path) -> Iterator[Ui]:
    with server.dagster_dev(
        demo_run.dagster_home, demo_run.env(), tmp_path / "dagster_dev.log"
    ) as (port, _process):
        base_url = f"http://127.0.0.1:{port}"
        # Dagster's first-visit "Join the community" dialog (shown on loopback origins) would
        # cover the page: mark it seen, as its Skip button does.
        request = urllib.request.Request(
            f"{base_url}/graphql",
            data=json.dumps({"query": "mutation { setNuxSeen }"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.load(response)["data"]["setNuxSeen"] is True
        yield Ui(base_url, demo_run)


def _chromium(profile: Path, *arguments: str) -> subprocess.CompletedProcess[bytes]:
    """One headless chromium call in its own session, its whole group ended afterwards."""
    process = subprocess.Popen(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *arguments],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        stdout, _ = process.communicate(timeout=PAGE_TIMEOUT_S)
    finally:
        end_group(process, grace_s=5)  # helpers chromium left behind
    return subprocess.CompletedProcess(process.args, process.returncode, stdout)


def page_text(dom: str) -> str:
    """The visible text of a dumped DOM: scripts and styles dropped, tags to spaces."""
    dom = re.sub(r"<(script|style)\b[^>]*>.*?</\1>", " ", dom, flags=re.S | re.I)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom)))


def render(url: str, screenshot: Path, profile: Path) -> str:
    """The page's text after the virtual-time budget, and its screenshot saved."""
    dumped = _chromium(profile / "dom", "--dump-dom", url)
    assert dumped.returncode == 0, f"chromium --dump-dom {url}: exit {dumped.returncode}"
    shot = _chromium(profile / "shot", f"--screenshot={screenshot}", url)
    assert shot.returncode == 0 and screenshot.is_file(), f"no screenshot of {url}"
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert screenshot.stat().st_size > 20_000  # a rendered page, not a blank one
    return page_text(dumped.stdout.decode("utf-8", "replace"))


def _our_chromiums(tmp_path: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if str(tmp_path) in " ".join(process.info["cmdline"] or []):
                found.append(process)
    return found


def test_asset_graph_and_run_page_render(ui: Ui, tmp_path: Path) -> None:
    with dg.DagsterInstance.from_config(str(ui.demo.dagster_home)) as instance:
        runs = instance.get_runs(dg.RunsFilter(job_name="benchmark_job"))
    assert len(runs) == 1
    run_id = runs[0].run_id
    profile = tmp_path / "chromium"

    assets_page = render(f"{ui.base_url}/assets", tmp_path / "assets.png", profile)
    for name in ("benchmark_run", "warehouse", "latency", "throughput", "prompts", "tiny_lm"):
        assert name in assets_page, name
    assert "Materialized" in assets_page  # the prompts artefact
    assert "Never materialized" in assets_page  # the artefacts the tiny spec does not use

    lineage = render(f"{ui.base_url}/asset-groups", tmp_path / "lineage.png", profile)
    for group in ("artifacts", "benchmark", "reports"):
        assert group in lineage, group

    report = render(
        f"{ui.base_url}/assets/latency?partition=tiny", tmp_path / "latency.png", profile
    )
    assert "p99 ms" in report and "| solo |" not in report  # a table, not raw Markdown
    assert "plot_latency_cdf" in report and "solo" in report
    # Dagster's UI renders Markdown of 1,000 characters or more (our base64 plots) behind a
    # "[Show Markdown]" link that opens it in a dialog; shorter Markdown (the table) inline.
    assert re.search(r"plot_latency_cdf .{0,40}\[Show Markdown\]", report), report[:2000]

    page = render(f"{ui.base_url}/runs/{run_id}", tmp_path / "run.png", profile)
    assert "benchmark_job" in page and run_id[:8] in page
    assert "partition: tiny" in page
    for text in ("RUN_SUCCESS", "ASSET_MATERIALIZATION", "warehouse", "latency"):
        assert text in page, text

    assert not _our_chromiums(tmp_path)
