"""Polling for the trainer's subprocess tests: the first truthy value of a probe, or a failure
that names what never happened."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def until(cond: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Call ``cond`` every 50 ms until it returns something truthy (returned); fail naming
    ``what`` after ``timeout_s``."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
