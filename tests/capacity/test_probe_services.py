"""A capacity probe's services: each server up for the whole search becomes an `external`
service at its URL, keeping its `metrics`, so every probe scrapes the server as a run does."""

from __future__ import annotations

from typing import Any

from stages.capacity.search_services import SharedService, as_external
from stages.spec.services import ServiceSpec


def test_a_probe_keeps_the_servers_metrics_and_validates() -> None:
    services: list[dict[str, Any]] = [
        {"name": "llm", "type": "transformers.serve", "metrics": {"period_ms": 200}},
        {"name": "plain", "type": "transformers.serve"},
    ]
    shared = {
        "llm": SharedService("http://127.0.0.1:8001", "/health"),
        "plain": SharedService("http://127.0.0.1:8002", "/health"),
    }
    replaced, overrides = as_external(services, shared)
    assert replaced[0]["metrics"] == {"period_ms": 200}
    assert "metrics" not in replaced[1]
    assert [ServiceSpec.model_validate(service).type for service in replaced] == ["external"] * 2
    assert "services.llm.type=external" in overrides
