"""SIGTERM/SIGINT as a stop flag, and TensorFlow's own preemption notice turned into the same flag.

Imports no TensorFlow at import time: the handlers are installed before TensorFlow loads, so a
pod stopped early does not die of the signal's default action.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

TF_PREEMPTION_KEY = "TF_DEFAULT_PREEMPTION_NOTICE_KEY"
"""Coordination-service key TensorFlow's own SIGTERM handler writes (its value: the task)."""


class StopSignal:
    """SIGTERM/SIGINT -> a flag the training loop shares with every worker at the next call (and
    the event a finished or leaving worker waits on)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason = ""

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.reason = signal.Signals(signum).name
        self.event.set()

    def request(self, reason: str) -> None:
        self.reason = reason
        self.event.set()


def watch_tf_preemption(stop: StopSignal) -> None:
    """Turn TensorFlow's own preemption notice into the stop flag.

    Between the coordination service's start and :meth:`StopSignal.install` a SIGTERM goes to
    TensorFlow's C++ handler, which only writes ``TF_PREEMPTION_KEY`` to the cluster's key-value
    store. A thread blocked on that key (the call releases the GIL) sets the flag on every
    worker, so all stop at the first call instead of training until SIGKILL.
    """
    import tensorflow as tf
    from tensorflow.python.eager import context

    def wait() -> None:
        try:
            task = context.context().get_config_key_value(TF_PREEMPTION_KEY)
        except tf.errors.OpError:  # the service is gone: the loop reports that itself
            return
        stop.request(f"SIGTERM to {task}")

    threading.Thread(target=wait, name="tf-preemption", daemon=True).start()
