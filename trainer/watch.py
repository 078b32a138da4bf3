"""What the StatefulSet says the running job must do: continue, restart at another world size, or
stop for a rollout; and the chief's thread that polls it while training.

The decision is a pure function (:func:`decide`) of the live replica count, the StatefulSet's
``status.updateRevision`` and the pod's own revision (``TFD_POD_REVISION``). The poll runs
whenever API access is configured (``contract.api_configured``); the live replica count is
compared only with ``TFD_REPLICAS_SOURCE=api``.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Mapping

from trainer import contract, k8s
from trainer.errors import ContractError
from trainer.logs import Log
from trainer.supervisor import waiting_pause


class Decision(enum.Enum):
    CONTINUE = "continue"
    RESTART_WORLD = "restart-world"
    """The replica count changed: stop at a checkpoint, exit 76, restart at the new size."""
    ROLLOUT = "rollout"
    """The pod template changed (OnDelete): stop at a checkpoint, delete every pod."""


def decide(
    world_size: int, live_replicas: int | None, update_revision: str, own_revision: str
) -> Decision:
    """The job's next move. ``live_replicas`` is ``None`` when the replica count is not watched
    (``TFD_REPLICAS_SOURCE=env``). A rollout wins over a size change: the recreated pods read the
    live size anyway. An empty revision on either side (not set yet, or no
    ``TFD_POD_REVISION``) is never a rollout."""
    if update_revision and own_revision and update_revision != own_revision:
        return Decision.ROLLOUT
    if live_replicas is not None and live_replicas != world_size:
        return Decision.RESTART_WORLD
    return Decision.CONTINUE


def decide_from_state(
    env: Mapping[str, str], world_size: int, state: k8s.StatefulSetState
) -> Decision:
    """:func:`decide` for this pod's environment and a StatefulSet read."""
    live = state.replicas if contract.replicas_source(env) == "api" else None
    own = env.get(contract.ENV_POD_REVISION, "").strip()
    return decide(world_size, live, state.update_revision, own)


class StatefulSetWatch:
    """Polls the StatefulSet every ``interval_s`` and sets ``world_changed`` or ``rollout``.

    Nothing a read raises ends the thread: a failed read is a ``warning`` and the next poll
    tries again, after ``interval_s`` or, while reads keep failing, the supervisor's doubling
    pause (:func:`~trainer.supervisor.waiting_pause`) if that is longer. ``stop()`` ends the
    thread (training finished: nothing to watch while a finished worker waits).
    """

    def __init__(
        self,
        env: Mapping[str, str],
        world_size: int,
        interval_s: float,
        log: Log,
        read: Callable[[Mapping[str, str]], k8s.StatefulSetState] = k8s.statefulset_state,
    ) -> None:
        self.env = env
        self.world_size = world_size
        self.interval_s = interval_s
        self.log = log
        self.read = read
        self.world_changed = threading.Event()
        self.rollout = threading.Event()
        self._stopped = threading.Event()

    def start(self) -> StatefulSetWatch:
        threading.Thread(target=self._poll, name="statefulset-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _poll(self) -> None:
        failures = 0
        pause = self.interval_s
        while not self._stopped.wait(pause):
            try:
                if self.check(self.read(self.env)) is not Decision.CONTINUE:
                    return
                failures, pause = 0, self.interval_s
            except Exception as err:  # noqa: BLE001 - a dead watch would miss resizes and rollouts
                # The adapter's own errors are one line already; anything else is a surprise
                # worth its type name.
                why = str(err) if isinstance(err, ContractError) else f"{err!r}"
                self.log.event("warning", message=f"StatefulSet check failed: {why}")
                pause = max(self.interval_s, waiting_pause(self.interval_s, failures))
                failures += 1

    def check(self, state: k8s.StatefulSetState) -> Decision:
        """Apply one StatefulSet read: sets the matching event and logs why."""
        decision = decide_from_state(self.env, self.world_size, state)
        if decision is Decision.ROLLOUT:
            own = self.env.get(contract.ENV_POD_REVISION, "")
            self.log.event(
                "warning",
                message=f"rollout: StatefulSet revision {state.update_revision}, this pod "
                f"{own}: stopping to recreate every pod",
            )
            self.rollout.set()
        elif decision is Decision.RESTART_WORLD:
            self.log.event(
                "warning",
                message=f"world size {self.world_size} -> {state.replicas}: stopping to restart",
            )
            self.world_changed.set()
        return decision
