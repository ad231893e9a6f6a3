"""NumPy's transparent huge pages: off in vllm-load's own processes, unless the user says.

NumPy asks the kernel to back every array of 4 MB or more with huge pages (madvise). Where the
kernel then compacts memory to find one at the first touch of such an array (the common
`madvise` setting of /sys/kernel/mm/transparent_hugepage/defrag), that touch costs far more than
it saves for arrays made and freed by the thousand: a report on a million requests, whose
columns are 8 MB each, spent 3.2 s in the kernel with them and 1.4 s without (wall 11 s -> 8 s).
NumPy reads NUMPY_MADVISE_HUGEPAGE when it is imported, so the command sets it before anything
imports NumPy, and the processes it starts inherit it.
"""

from __future__ import annotations

import os

ENV = "NUMPY_MADVISE_HUGEPAGE"


def numpy_without_huge_pages() -> None:
    """Tell NumPy, not yet imported, to leave huge pages alone (a value already set stays)."""
    os.environ.setdefault(ENV, "0")
