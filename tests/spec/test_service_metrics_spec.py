"""`services[].metrics`: its defaults, and bad input as one line with its YAML path (exit 2),
the scraper staying on loopback (an `external` url elsewhere is refused)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from stages.cli.app import app
from stages.validation.loading import load_spec
from tests.spec.test_services_spec import problems, spec_with

LOCAL = "  - {name: llm, type: external, url: 'http://127.0.0.1:8000/v1', metrics: %s}\n"


def test_metrics_defaults_fill_in(tmp_path: Path) -> None:
    (service,) = load_spec(spec_with(tmp_path, LOCAL % "{}")).spec.services
    assert service.metrics is not None
    assert (service.metrics.path, service.metrics.period_ms) == ("/metrics", 1000.0)
    assert (service.metrics.timeout_ms, service.metrics.buckets) == (1000.0, False)
    (plain,) = load_spec(spec_with(tmp_path, LOCAL.replace(", metrics: %s", ""))).spec.services
    assert plain.metrics is None


@pytest.mark.parametrize(
    ("services", "expected"),
    [
        (
            "  - {name: llm, type: external, url: 'http://10.0.0.7:8000', metrics: {}}\n",
            "services[0].metrics: metrics are scraped over loopback only; url host '10.0.0.7'",
        ),
        (LOCAL % "{path: metrics}", "services[0].metrics.path: String should match pattern"),
        (LOCAL % "{period_ms: 10}", "services[0].metrics.period_ms: Input should be greater"),
        (LOCAL % "{period: 100}", "services[0].metrics.period: unknown key 'period'"),
    ],
    ids=["off loopback", "relative path", "period too short", "unknown key"],
)
def test_bad_metrics_give_one_line(tmp_path: Path, services: str, expected: str) -> None:
    found = problems(tmp_path, services)
    assert len(found) == 1, found
    assert found[0].startswith(expected), found


def test_validate_exits_2_on_a_remote_metrics_endpoint(tmp_path: Path) -> None:
    remote = "  - {name: llm, type: external, url: 'https://example.org', metrics: {}}\n"
    result = CliRunner().invoke(app, ["validate", str(spec_with(tmp_path, remote))])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert "services[0].metrics: metrics are scraped over loopback only" in line


def test_a_service_without_metrics_keeps_its_hash(tmp_path: Path) -> None:
    """`metrics: null` is left out of the normal form: a spec written before the field hashes
    as it did; one with metrics hashes apart."""
    plain = load_spec(spec_with(tmp_path, LOCAL.replace(", metrics: %s", "")))
    (service,) = plain.normalized["services"]
    assert "metrics" not in service
    scraped = load_spec(spec_with(tmp_path, LOCAL % "{}"))
    assert scraped.normalized["services"][0]["metrics"]["path"] == "/metrics"
    assert scraped.spec_hash != plain.spec_hash
