"""CPU time and memory of the host and of single processes, cheaply, for the host sampler.

At 100 Hz psutil's parsing dominates the sampler's cost, so on Linux the hot path preads
/proc files kept open (about 3x cheaper); psutil finds children and covers other systems.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_HAVE_PROC = Path("/proc/self/stat").exists()
_HOST_PROC_FILES = ("/proc/stat", "/proc/meminfo") if _HAVE_PROC else ()


def ppid_map() -> dict[int, int]:
    """pid -> parent pid of every visible process, in one pass (/proc, else psutil)."""
    if not _HAVE_PROC:
        return {process.pid: process.info["ppid"] for process in psutil.process_iter(["ppid"])}
    ppids: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                data = stat.read(512)
        except OSError:  # exited since the listing
            continue
        # Fields after "(comm)": state ppid ...; comm may itself hold spaces and parentheses.
        ppids[int(entry.name)] = int(data[data.rfind(b")") + 2 :].split(maxsplit=2)[1])
    return ppids


def descendants(children_of: dict[int, list[int]], root: int, exclude: set[int]) -> set[int]:
    """The root and its descendants, not entering the subtree of any pid in `exclude`."""
    found = {root}
    stack = [root]
    while stack:
        for child in children_of.get(stack.pop(), ()):
            if child not in exclude and child not in found:
                found.add(child)
                stack.append(child)
    return found


class ProcessReader:
    """CPU seconds and RSS of one process; raises psutil.NoSuchProcess once it is gone."""

    def __init__(self, process: psutil.Process) -> None:
        self.process = process
        self.pid = process.pid
        self._fd: int | None = None
        if _HAVE_PROC:
            try:
                # The open file pins this very process: a recycled pid can never alias it.
                self._fd = os.open(f"/proc/{self.pid}/stat", os.O_RDONLY)
            except FileNotFoundError:
                raise psutil.NoSuchProcess(self.pid) from None
            except OSError:
                self._fd = None  # e.g. hidepid: fall back to psutil

    def read(self) -> tuple[float, int]:
        """(user + system CPU seconds, RSS bytes); a zombie or an exiting process counts as gone.

        A process part way through exit() has released its memory (RSS 0) before the kernel
        marks it a zombie; every live user process has resident pages, so RSS 0 means leaving.
        """
        if self._fd is None:
            with self.process.oneshot():
                times = self.process.cpu_times()
                rss_bytes = self.process.memory_info().rss
                if rss_bytes == 0:
                    raise psutil.ZombieProcess(self.pid)
            return times.user + times.system, rss_bytes
        try:
            data = os.pread(self._fd, 1024, 0)
        except OSError:  # ESRCH once reaped
            raise psutil.NoSuchProcess(self.pid) from None
        # Fields after "(comm)": state ppid ... utime(11) stime(12) ... rss(21) in pages.
        fields = data[data.rfind(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            raise psutil.ZombieProcess(self.pid)
        rss_pages = int(fields[21])
        if rss_pages == 0:
            raise psutil.ZombieProcess(self.pid)
        cpu_s = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
        return cpu_s, rss_pages * _PAGE_BYTES

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class HostReader:
    """Host CPU (busy, total) seconds and memory in use, from /proc or psutil."""

    def __init__(self) -> None:
        self._stat_fd: int | None = None
        self._meminfo_fd: int | None = None
        if _HOST_PROC_FILES:
            try:
                self._stat_fd = os.open(_HOST_PROC_FILES[0], os.O_RDONLY)
                self._meminfo_fd = os.open(_HOST_PROC_FILES[1], os.O_RDONLY)
            except OSError:
                self.close()

    def cpu_s(self) -> tuple[float, float]:
        """Cumulative (busy, total) CPU seconds over all cores."""
        if self._stat_fd is None:
            times = psutil.cpu_times()
            idle_s = times.idle + getattr(times, "iowait", 0.0)
            # Linux counts guest time inside user/nice already (as psutil.cpu_percent knows).
            total_s = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
            return total_s - idle_s, total_s
        line = os.pread(self._stat_fd, 256, 0).split(b"\n", 1)[0]
        # cpu  user nice system idle iowait irq softirq steal guest guest_nice (clock ticks)
        ticks = [int(value) for value in line.split()[1:9]]
        total = sum(ticks)
        return (total - ticks[3] - ticks[4]) / _CLOCK_TICKS, total / _CLOCK_TICKS

    def memory_used_bytes(self) -> int:
        if self._meminfo_fd is None:
            memory = psutil.virtual_memory()
            return memory.total - memory.available
        data = os.pread(self._meminfo_fd, 4096, 0)
        return (_meminfo_kib(data, b"MemTotal:") - _meminfo_kib(data, b"MemAvailable:")) * 1024

    def close(self) -> None:
        for fd in (self._stat_fd, self._meminfo_fd):
            if fd is not None:
                os.close(fd)
        self._stat_fd = self._meminfo_fd = None


def _meminfo_kib(data: bytes, key: bytes) -> int:
    start = data.index(key) + len(key)
    return int(data[start : data.index(b"kB", start)])
