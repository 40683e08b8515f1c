"""Hugging Face hub models by name (`hf:<org>/<name>` in stage configs), for users with a network
or a filled local cache. Without either, loading fails FAST with one line.

Order: the local cache first (`local_files_only=True`, no network at all); then, unless offline
mode is on (`HF_HUB_OFFLINE` / `TRANSFORMERS_OFFLINE`), a TCP connect to the hub endpoint (or the
HTTPS proxy) with a short timeout, so an unreachable hub costs seconds, not the minutes of
retries a download would; then the download itself, with short etag/download timeouts. Every
failure becomes one `ArtifactError` line.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from stages.artifacts.store import ArtifactError

HUB_PREFIX = "hf:"
CONNECT_TIMEOUT_S = 3.0
"""How long the reachability probe waits for a TCP connection to the hub."""
HUB_TIMEOUT_S = 5
"""Etag and download timeouts set for hub calls unless the user set HF_HUB_*_TIMEOUT."""
DEFAULT_ENDPOINT = "https://huggingface.co"

Task = Literal["causal_lm", "encoder"]
HUB_NAME_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
"""One part of a hub id (`org` or `name`), as the hub allows them."""


def hub_name(reference: str) -> str | None:
    """`org/name` of an `hf:org/name` model reference, else None."""
    return reference[len(HUB_PREFIX) :] if reference.startswith(HUB_PREFIX) else None


def check_hub_reference(reference: str) -> str:
    """The hub name of an `hf:` reference, or ValueError (for config validators)."""
    name = hub_name(reference)
    if name is None:
        raise ValueError(f"'{reference}' is not a hub reference (hf:<org>/<name>)")
    parts = name.split("/")
    # Hub ids only: a part such as `..` or `/abs` would make from_pretrained load a local folder
    if len(parts) > 2 or not all(
        HUB_NAME_PART.fullmatch(part) and ".." not in part for part in parts
    ):
        raise ValueError(f"bad hub model name '{name}': expected hf:<org>/<name> or hf:<name>")
    return name


def offline_mode() -> bool:
    """Whether the user turned the hub off (as huggingface_hub reads it)."""
    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return any(str(flag).strip().upper() in ("1", "ON", "YES", "TRUE") for flag in flags if flag)


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or DEFAULT_ENDPOINT


def probe_endpoint(endpoint: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise OSError unless a TCP connection to the endpoint (or the proxy that would carry the
    request) opens within `timeout_s`."""
    parts = urlsplit(endpoint)
    proxy = (
        os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
        if parts.scheme == "https"
        else os.environ.get("HTTP_PROXY") or os.environ.get("http_proxy")
    )
    target = urlsplit(proxy) if proxy else parts
    host = target.hostname or ""
    port = target.port or (443 if target.scheme == "https" else 80)
    with socket.create_connection((host, port), timeout=timeout_s):
        pass


def load_pretrained(
    source: str | Path, task: Task, local_files_only: bool, trust_remote_code: bool = False
) -> tuple[Any, Any]:
    """(model in eval mode, tokenizer) through transformers, from a hub name or a model folder;
    the one place collobench calls `from_pretrained` for a text model. `trust_remote_code`
    lets a folder's own model code run (a model entry allowed to, only)."""
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    loader = AutoModelForCausalLM if task == "causal_lm" else AutoModel
    options = {"local_files_only": local_files_only, "trust_remote_code": trust_remote_code}
    tokenizer = AutoTokenizer.from_pretrained(source, **options)
    model = loader.from_pretrained(source, **options).eval()
    return model, tokenizer


def _from_pretrained(task: Task, name: str, local_files_only: bool) -> tuple[Any, Any]:
    """A hub model through `load_pretrained`; the one call tests replace with a fake."""
    return load_pretrained(name, task, local_files_only)


def _short_timeouts() -> None:
    """Short hub timeouts, unless the user chose theirs (huggingface_hub reads the variables at
    import, so its constants are set too when it is already imported)."""
    for variable in ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT"):
        if not os.environ.get(variable):
            os.environ[variable] = str(HUB_TIMEOUT_S)
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - transformers depends on it
        return
    constants.HF_HUB_ETAG_TIMEOUT = int(os.environ["HF_HUB_ETAG_TIMEOUT"])
    constants.HF_HUB_DOWNLOAD_TIMEOUT = int(os.environ["HF_HUB_DOWNLOAD_TIMEOUT"])


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def load_hub_model(
    name: str, task: Task = "causal_lm", connect_timeout_s: float = CONNECT_TIMEOUT_S
) -> tuple[Any, Any]:
    """(model, tokenizer) of hub model `name` (`org/name`), from the local cache when it is
    there, else downloaded; ArtifactError (one line, within seconds) when neither works."""
    try:
        return _from_pretrained(task, name, local_files_only=True)
    except Exception as error:
        cached_error = error  # not cached (or a broken cache entry): try the hub
    unavailable = f"hub model '{name}' is not available offline and the hub cannot be reached"
    if offline_mode():
        raise ArtifactError(
            f"{unavailable}: offline mode is on (HF_HUB_OFFLINE) and the local cache "
            f"has no usable copy ({_one_line(cached_error)})"
        ) from None
    endpoint = hub_endpoint()
    try:
        probe_endpoint(endpoint, connect_timeout_s)
    except OSError as error:
        raise ArtifactError(
            f"{unavailable}: no connection to {endpoint} within {connect_timeout_s:g} s "
            f"({_one_line(error)})"
        ) from None
    _short_timeouts()
    try:
        return _from_pretrained(task, name, local_files_only=False)
    except Exception as error:
        # transformers wraps network failures in OSError/ValueError; huggingface_hub raises
        # httpx/requests errors or its own; all end as one line naming the model.
        message = _one_line(error)
        lowered = message.lower()
        network = any(
            word in lowered
            for word in ("connect", "timeout", "timed out", "resolve", "network", "offline")
        )
        if network:
            raise ArtifactError(f"{unavailable}: {message}") from None
        raise ArtifactError(f"hub model '{name}' could not be loaded: {message}") from None
