"""A search's folder on disk, crash-safe: `search.json` (the settings), `probes.jsonl` (one line
per finished probe, fsynced before the next probe starts) and `capacity.json` (the result,
replaced atomically). A search killed at any instant resumes from what is here and loses no
finished probe; a line torn by the kill is ignored."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from pydantic import ValidationError

from stages.contracts.capacity_files import (
    CAPACITY_FILE,
    PROBE_RUNS_DIR,
    PROBES_FILE,
    SEARCH_FILE,
    CapacityResult,
    ProbeRecord,
    SearchSettings,
)

log = logging.getLogger(__name__)


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` all at once: a temporary file, fsynced, then a rename (a
    reader sees the old file or the new one, never half of one)."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    """Make a rename or a new file's entry durable (a no-op where folders cannot be opened)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


class SearchStore:
    """The files of one search under `search_dir` (created on the first write)."""

    def __init__(self, search_dir: Path) -> None:
        self.search_dir = Path(search_dir)

    @property
    def settings_path(self) -> Path:
        return self.search_dir / SEARCH_FILE

    @property
    def probes_path(self) -> Path:
        return self.search_dir / PROBES_FILE

    @property
    def result_path(self) -> Path:
        return self.search_dir / CAPACITY_FILE

    @property
    def probe_runs_dir(self) -> Path:
        return self.search_dir / PROBE_RUNS_DIR

    def exists(self) -> bool:
        """Whether a search was started here (its settings were written)."""
        return self.settings_path.is_file()

    def write_settings(self, settings: SearchSettings) -> None:
        self.search_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(self.settings_path, settings.model_dump_json(by_alias=True, indent=2))

    def read_settings(self) -> SearchSettings:
        return SearchSettings.model_validate_json(self.settings_path.read_text(encoding="utf-8"))

    def append_probe(self, probe: ProbeRecord) -> None:
        """One JSON line, flushed and fsynced before returning. A torn line left by a crash
        is cut off first, so the new line starts on a line of its own."""
        self.search_dir.mkdir(parents=True, exist_ok=True)
        self._cut_torn_tail()
        line = probe.model_dump_json() + "\n"
        with open(self.probes_path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        _fsync_folder(self.search_dir)

    def read_probes(self) -> list[ProbeRecord]:
        """Every recorded probe in order; a last line torn by a crash is ignored (a bad line
        anywhere else is corruption, not a crash, and raises)."""
        if not self.probes_path.is_file():
            return []
        lines = self.probes_path.read_text(encoding="utf-8").split("\n")
        complete, tail = lines[:-1], lines[-1]  # after the last newline: torn or empty
        if tail.strip():
            log.warning("%s: ignoring a torn last line (%d bytes)", self.probes_path, len(tail))
        probes = []
        for number, line in enumerate(complete, start=1):
            if not line.strip():
                continue
            try:
                probes.append(ProbeRecord.model_validate_json(line))
            except ValidationError as error:
                raise ValueError(
                    f"{self.probes_path}:{number}: not a probe record: {error}"
                ) from None
        return probes

    def _cut_torn_tail(self) -> None:
        """Truncate the probes file after its last newline (drops a line torn by a crash)."""
        if not self.probes_path.is_file():
            return
        data = self.probes_path.read_bytes()
        if not data or data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1
        with open(self.probes_path, "r+b") as handle:
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())

    def write_result(self, result: CapacityResult) -> None:
        """capacity.json, atomically (temporary file + rename)."""
        self.search_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(self.result_path, result.model_dump_json(by_alias=True, indent=2))

    def read_result(self) -> CapacityResult | None:
        if not self.result_path.is_file():
            return None
        return CapacityResult.model_validate_json(self.result_path.read_text(encoding="utf-8"))
