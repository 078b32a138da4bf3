"""What the trainer tells ``tfd`` through its log lines: the event names and how they group.

Each worker line is ``{"ts", "event", "worker", ...}`` (``trainer.logs.Log``); ``Log.event``
refuses a name that is not an :class:`Event`, and ``tfd`` decides a run's phase from these
groups, so a renamed or new event is one edit here.
"""

from __future__ import annotations

from enum import StrEnum


class Event(StrEnum):
    """Every event a worker logs (the supervisor's ``restart`` and ``supervisor_exit`` too)."""

    FORMING = "forming"
    INPUT_SCALE = "input_scale"
    INPUT_ONLY = "input_only"
    PRECISION = "precision"
    LOSS_SCALE = "loss_scale"
    CPU_FALLBACK = "cpu_fallback"
    LEASE = "lease"
    RUN_MANIFEST = "run_manifest"
    START = "start"
    RESUME = "resume"
    RESCALE = "rescale"
    WAITING = "waiting"
    FIRST_STEP = "first_step"
    PROGRESS = "progress"
    EPOCH = "epoch"
    EVAL = "eval"
    CHECKPOINT = "checkpoint"
    CHECKPOINT_WRITTEN = "checkpoint_written"
    RESCUE = "rescue"
    RESCUE_COPY = "rescue_copy"
    STOP = "stop"
    ROLLOUT = "rollout"
    POD_DELETED = "pod_deleted"
    RESTART = "restart"
    SUPERVISOR_EXIT = "supervisor_exit"
    TRAINED = "trained"
    DONE = "done"
    SCALED_TO_ZERO = "scaled_to_zero"
    IDLE = "idle"
    CONTINUE = "continue"
    SURPLUS = "surplus"
    WARNING = "warning"


TRAINING_EVENTS = frozenset(
    {Event.PROGRESS, Event.FIRST_STEP, Event.EPOCH, Event.CHECKPOINT, Event.EVAL}
)
"""A worker whose last event is one of these trains."""
FORMING_EVENTS = frozenset(
    {
        Event.FORMING,
        Event.START,
        Event.RESUME,
        Event.INPUT_SCALE,
        Event.PRECISION,
        Event.LOSS_SCALE,
        Event.LEASE,
        Event.RUN_MANIFEST,
    }
)
"""... is starting: the cluster forms, the run is restored, nothing trained yet."""
RESTART_EVENTS = frozenset(
    {Event.RESTART, Event.STOP, Event.RESCALE, Event.ROLLOUT, Event.POD_DELETED}
)
"""... stopped to start again (a lost peer, a rollout, a resize)."""
DONE_EVENTS = frozenset({Event.TRAINED, Event.DONE, Event.SCALED_TO_ZERO, Event.IDLE})
"""... finished the run."""
NOTABLE_EVENTS = frozenset(
    {
        Event.START,
        Event.RESUME,
        Event.RESCALE,
        Event.STOP,
        Event.RESTART,
        Event.ROLLOUT,
        Event.POD_DELETED,
        Event.DONE,
        Event.SCALED_TO_ZERO,
        Event.WARNING,
        Event.CONTINUE,
        Event.SURPLUS,
        Event.SUPERVISOR_EXIT,
    }
)
"""Events worth listing among a run's last events (``tfd status``)."""
ERROR_PREFIX = "trainer: error: "
"""How the trainer prints a known error: one line on stderr, then its exit code
(``trainer.errors``); ``tfd`` shows the line as a failed worker's cause."""
