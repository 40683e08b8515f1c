"""A plot as Dagster metadata: Dagster has no image metadata type, so a PNG is inlined in
Markdown as a base64 data URI (the report assets' plots, the capacity search's and region's)."""

import base64
from pathlib import Path


def image_markdown(path: Path, title: str) -> str:
    """A PNG inlined as a base64 data URI in Markdown (what Dagster's UI can render)."""
    encoded = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"![{title}](data:image/png;base64,{encoded})"
