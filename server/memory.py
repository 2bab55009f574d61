"""Give the memory of big request bodies back to the operating system once they are freed.

glibc's malloc serves a block above its mmap threshold from a mapping of its own, unmapped when
the block is freed, and a smaller one from heaps it keeps. The threshold starts at 128 KiB but
rises to the size of each mapped block freed, up to 32 MiB: after one big body, the next bodies
up to 32 MiB (and their decoded copies, and the store's) come from the heaps, and a burst of
them leaves the server holding that memory when they are gone. Sixteen concurrent 24 MB submits
left a server at 640 MB of anonymous memory long after they were stored (from 32 MB); with the
threshold fixed at `MMAP_THRESHOLD_BYTES` it went back to 70 MB, and the burst's peak halved.

Blocks under the threshold, which is every claim, ack and small submit, are served as before;
a mapping per big buffer costs its page faults, small beside copying the buffer. An operator's
own `MALLOC_MMAP_THRESHOLD_` is left as set. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger("lakeshore.server")

#: mallopt's parameter number for the mmap threshold (glibc's malloc.h).
M_MMAP_THRESHOLD = -3
#: Blocks this size and above get a mapping of their own, returned when freed.
MMAP_THRESHOLD_BYTES = 1024 * 1024
#: The environment variable glibc reads the same setting from at start.
ENV = "MALLOC_MMAP_THRESHOLD_"


def return_big_blocks() -> bool:
    """Fix glibc's mmap threshold for this process; True when it was set here."""
    if ENV in os.environ:
        return False  # the operator chose
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version"):  # glibc only: musl's mallopt does nothing
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1:
        log.warning("mallopt(M_MMAP_THRESHOLD) refused; freed bodies may stay in the heap")
        return False
    return True
