"""Reads Prometheus's text exposition format (version 0.0.4, what vLLM, SGLang and TGI serve at
`/metrics`) into (metric, labels, value) samples, with no client library at run time.

One sample per line `name{label="value",...} value [timestamp]`; `# HELP`/`# TYPE` and other
comment lines are skipped, a line that does not parse is counted and skipped (one odd line must
not cost the whole scrape). Label values are unescaped (`\\\\`, `\\"`, `\\n`), so the labels
read back equal those the server set. Values keep `NaN` and `+Inf` as floats.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    """One exposed sample: the series name as exposed (`_total`, `_bucket`... included)."""

    metric: str
    labels: dict[str, str]
    value: float


def _labels(text: str) -> dict[str, str] | None:
    """The label set of `{...}`'s inside; None when it does not parse."""
    labels: dict[str, str] = {}
    position = 0
    text = text.strip()
    while position < len(text):
        match = _LABEL.match(text, position)
        if match is None:
            return None
        raw = match.group(2)
        labels[match.group(1)] = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], raw)
        position = match.end()
    return labels


def _value(text: str) -> float | None:
    try:
        return float(text)  # float() reads NaN, +Inf, -Inf as Prometheus writes them
    except ValueError:
        return None


def parse_exposition(text: str) -> tuple[list[Sample], int]:
    """The samples of an exposition, and how many non-comment lines did not parse."""
    samples: list[Sample] = []
    bad = 0
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        labels = _labels(match.group(2) or "") if match else None
        value = _value(match.group(3)) if match else None
        if match is None or labels is None or value is None:
            bad += 1
            continue
        samples.append(Sample(match.group(1), labels, value))
    return samples, bad


def is_bucket(sample: Sample) -> bool:
    """A histogram bucket series (`<name>_bucket` with an `le` label): many per histogram."""
    return sample.metric.endswith("_bucket") and "le" in sample.labels


def finite_or_none(value: float) -> float | None:
    """NaN as None (a missing value in the table); infinities are kept."""
    return None if math.isnan(value) else value
