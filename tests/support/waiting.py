"""Waiting on a condition, the one way the tests wait for something outside their control.

``wait_until`` polls a predicate (a socket connectable, a row gone from ``pg_stat_activity``,
a file written by a background writer) with a bounded deadline and a growing interval, and
fails naming what it waited for. A test never sleeps a fixed time and hopes; where the code
under test signals, wait on its event instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    check: Callable[[], bool], timeout: float, what: str, *, interval: float = 0.01
) -> float:
    """Poll ``check`` until it is true; returns the seconds it took. Fails (AssertionError)
    when it is still false after ``timeout`` seconds."""
    start = time.monotonic()
    delay = interval
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)
    return time.monotonic() - start
