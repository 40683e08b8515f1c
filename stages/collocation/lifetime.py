"""Child processes never outlive the launcher: they ask the kernel for a signal when it dies."""

from __future__ import annotations

import ctypes
import ctypes.util
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Deliver `sig` to this process when its parent dies (Linux); False where unsupported.

    The kernel ties this to the parent *thread* that spawned us; the launcher spawns from its
    main thread, which lives as long as the launcher does.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)) == 0
    except OSError:
        return False
