"""TensorFlow's start-up notices on a machine without a CUDA driver, kept off the terminal.

The pip TensorFlow build probes CUDA when it starts. Without a driver it writes an ``I`` line
("Could not find cuda drivers on your machine, GPU will not be used"), then an ``E`` line
("failed call to cuInit: ... UNKNOWN ERROR (303)") and absl's "before absl::InitializeLog()"
notice: on every CPU run, and the ``E`` line reads like a failure. ``TF_CPP_MIN_LOG_LEVEL=3``
would hide them, and every real C++ error with them, so the local launcher drops exactly these
lines instead, and only after TensorFlow itself said the driver is missing; the launcher says
once that the run is on the CPU. The lines are still kept with the worker's other output.
"""

from __future__ import annotations

import re

_NO_DRIVER = re.compile(r"cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine")
# absl's notice comes before, and regardless of, the driver probe; it says nothing about the run.
_ABSL = re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called")
# The probe's consequence, dropped only after TensorFlow said the driver is missing.
_CUINIT = re.compile(r"cuda_platform\.cc:\d+\] failed call to cuInit: ")
NO_GPU_NOTE = "no CUDA driver on this machine: TensorFlow trains on the CPU"


class NoticeFilter:
    """Per worker process: :meth:`shown` says whether a line of its output goes to the terminal."""

    def __init__(self) -> None:
        self.no_driver = False

    def shown(self, line: str) -> bool:
        if _NO_DRIVER.search(line):
            self.no_driver = True
            return False
        if _ABSL.search(line):
            return False
        return not (self.no_driver and _CUINIT.search(line))
