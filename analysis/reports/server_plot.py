"""The server panels of the report's timeline plot (timeline.png), drawn when the run scraped a
service's metrics (`services[].metrics`): the client's latency over time, then the server's
requests running and waiting (and batch size), then its KV-cache use and prefix-cache hit rate,
from `server_metrics` (analysis/sql/report/server_timeline.sql) on the timeline's time axis.
A failed scrape breaks the lines and is marked with a red tick at the bottom of each panel.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pandas as pd
from matplotlib.axes import Axes

from analysis.warehouse.sql_files import sql_text

PANELS = 3
"""How many panels `draw_server_panels` fills (the caller makes room for them)."""
_SERIES = (
    (("client_latency_p50_ms", "client latency p50"),),
    (
        ("requests_running", "running"),
        ("requests_waiting", "waiting"),
        ("batch_size", "batch size"),
    ),
    (
        ("kv_cache_usage_pct", "KV cache use"),
        ("prefix_cache_hit_rate_pct", "prefix-cache hit rate"),
    ),
)
_LABELS = ("client latency (ms,\nmedian per scrape)", "server requests", "server cache (%)")


def server_timeline(
    connection: duckdb.DuckDBPyConnection, run_id: str, origin_ns: int
) -> pd.DataFrame:
    """The run's scrapes (empty when no service had `metrics`)."""
    params: dict[str, Any] = {"run_id": run_id, "origin_ns": origin_ns}
    return connection.execute(sql_text("report/server_timeline.sql"), params).df()


def draw_server_panels(axes: list[Axes], scrapes: pd.DataFrame) -> None:
    """One panel per figure group, a line per (service, series), broken at failed scrapes;
    the client's latency once (every service's scrapes carry the same, on its own times)."""
    first = sorted(scrapes["service"].unique())[:1]
    for axis, series, label in zip(axes, _SERIES, _LABELS, strict=True):
        for service, rows in scrapes.groupby("service", sort=True):
            client = series[0][0].startswith("client_")
            for column, name in series if service in first or not client else ():
                values = rows[column].astype(float)
                if values.notna().any():
                    axis.plot(
                        rows["t_s"], values, lw=1, label=name if client else f"{service}: {name}"
                    )
            failed = rows.loc[~rows["up"].astype(bool), "t_s"]
            if not failed.empty:
                axis.plot(
                    failed,
                    [0.0] * len(failed),
                    "|",
                    color="red",
                    transform=axis.get_xaxis_transform(),
                    label=f"{service}: failed scrape",
                )
        axis.set_ylabel(label)
