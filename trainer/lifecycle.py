"""One worker process from start to end: which run, whether it is finished, training, and what a
finished, surplus or rolled-out worker does (``--on-done``, rollouts, surplus pods).

The manifest and lease checks come first (:mod:`trainer.manifest`, :mod:`trainer.lease`), then
the ``DONE`` check (:mod:`trainer.done_marker`), then training (:mod:`trainer.train`). The rules:
docs/trainer.md, "Lifecycle". Imports no TensorFlow at import time: signal handlers and
``/metrics`` come first.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from trainer import contract, done_marker, k8s
from trainer.checkpoints import checkpoint_root
from trainer.config import Config
from trainer.errors import (
    EXIT_OK,
    EXIT_RESTART,
    ApiUnansweredError,
    ApiUnreachableError,
    ContractError,
    RestartRequested,
    RolloutRequested,
    TrainerError,
)
from trainer.lease import holder_identity
from trainer.logs import Log
from trainer.manifest import RunGuard
from trainer.metrics import Metrics, MetricsServer
from trainer.signals import StopSignal
from trainer.supervisor import waiting_pause
from trainer.train import Worker
from trainer.watch import Decision, decide_from_state

API_RETRY_BUDGET_S = 60.0
"""How long a worker keeps trying an API call that gets no answer (connection, DNS, timeout, an
answer cut short) or a 429/5xx one: the StatefulSet read at start (the world size, the uid of
the chief's lease holder), the scale to zero and the deletion of its own pod. Longer than an API
server restart or a DNS hiccup, well inside the startup probe's five minutes (the probes answer
meanwhile)."""

T = TypeVar("T")


def run(config: Config, env: Mapping[str, str]) -> int:
    """Train, or wait as a finished / surplus / outdated worker; returns the exit code or raises
    a ``TrainerError``."""
    api = contract.api_configured(env)
    if config.on_done == contract.ON_DONE_SCALE_TO_ZERO and not api:
        raise ContractError(
            f"--on-done {contract.ON_DONE_SCALE_TO_ZERO}: needs Kubernetes API access "
            f"({contract.ENV_API_URL}, or {contract.ENV_REPLICAS_SOURCE}=api); got neither; use "
            f"--on-done {contract.ON_DONE_EXIT} or {contract.ON_DONE_IDLE} without a cluster"
        )
    root = checkpoint_root(env)
    run_id = contract.run_id_from_env(env)
    explicit_tf_config = bool(env.get(contract.ENV_TF_CONFIG, "").strip())
    source_api = not explicit_tf_config and contract.replicas_source(env) == "api"
    stop = StopSignal()
    stop.install()
    # The probes answer before anything that can wait on the network (the StatefulSet read
    # below, its DNS lookup): after a planned restart the supervisor's new child must answer
    # the liveness probe within seconds, whatever the API server or DNS do. Task index -1 and
    # world size 0 mean "not known yet".
    metrics = Metrics(task_index=-1, world_size=0)
    revision = env.get(contract.ENV_POD_REVISION, "").strip()
    metrics.identify(run_id, revision, _supervisor_restarts(env))
    MetricsServer(metrics, contract.metrics_port(env), fd=contract.metrics_fd(env)).start()
    delay = contract.start_delay_seconds(env)
    if delay > 0:  # not admitted last time (exit 77): give the others time to stop
        Log(None).event("waiting", seconds=delay,
                        reason="not admitted yet: waiting for the other workers to stop for the "
                        "new world size")  # fmt: skip
        if stop.event.wait(delay):
            raise RestartRequested("stopped (SIGTERM) while waiting to be admitted")
    state, unread = _read_statefulset(env, source_api, stop) if api else (None, "")
    replicas = state.replicas if source_api and state is not None else None
    if replicas is not None and _ordinal(env) >= replicas:
        return _surplus(env, replicas, metrics, stop)
    asked = None if source_api else _template_replicas(env)
    if state is not None and asked is not None and asked <= _ordinal(env) < state.replicas:
        # A new template asks for fewer workers than the StatefulSet still counts (the count
        # is patched once the rollout is done): this pod goes when it is, and trains nothing.
        # Under an autoscaler (replicas from the API) the live count rules, not the template's.
        return _surplus(env, asked, metrics, stop, f"the template's {contract.ENV_REPLICAS}")

    spec = contract.cluster_spec_from_env(env, replicas)
    metrics.place(spec.task_index, spec.num_workers)
    log = Log(spec.task_index)
    if unread:
        holder = (
            f"; the chief's lease holder is {holder_identity(env)}, without the StatefulSet's uid"
            if spec.is_chief
            else ""
        )
        log.event("warning", message=f"StatefulSet check at start failed: {unread}{holder}")
    if config.input_only:
        from trainer import input_only

        input_only.run(config, spec, root, log)
        return EXIT_OK

    if state is not None and decide_from_state(env, spec.num_workers, state) is Decision.ROLLOUT:
        log.event("rollout", reason="this pod's revision is outdated; not training",
                  revision=revision, update_revision=state.update_revision)  # fmt: skip
        return _leave_for_rollout(env, stop, log)

    # Every worker, before anything is written and before the cluster forms: a start whose
    # settings change the run's result is refused (trainer.manifest), a finished run included.
    # The StatefulSet's uid tells this deployment's chief from another one with the same pod
    # names (another cluster on the same bucket); a recreated pod keeps it: instant take-back.
    guard = RunGuard(
        root,
        config,
        env,
        log,
        deployment=state.uid if state is not None else "",
        provenance=state.provenance if state is not None else None,
    )
    guard.check()
    record = done_marker.read_done(root)
    if record is not None and record.finished_for(config):
        log.event("done", reason="run finished; not training", run_id=run_id,
                  final_step=record.final_step, checkpoint_dir=root)  # fmt: skip
        return _after_done(config, env, metrics, stop, log, scale=True)
    if record is not None:
        log.event("continue", reason="more steps requested than the finished run's final step",
                  run_id=run_id, final_step=record.final_step,
                  requested_steps=record.requested_steps(config))  # fmt: skip

    worker = Worker(config, env, spec, root, log, metrics, stop)
    worker.guard = guard
    try:
        with guard.training(spec.is_chief):  # the chief's lease: one live chief per run
            worker.train()
    except RolloutRequested as err:
        log.event("rollout", reason=str(err), revision=revision)
        return _leave_for_rollout(env, stop, log)
    return _after_done(config, env, metrics, stop, log, scale=spec.is_chief)


def _read_statefulset(
    env: Mapping[str, str], required: bool, stop: StopSignal
) -> tuple[k8s.StatefulSetState | None, str]:
    """The StatefulSet at start, or ``None`` and why not. A read without an answer (connection,
    DNS, a timeout on a loaded node, an answer cut short) or with a 429/5xx one is tried again
    (:func:`_retrying`) in every mode: the StatefulSet exists (this pod runs under it), and its
    uid is the token of the chief's lease holder, which one failed read would drop. Out of tries
    or refused (403): a ContractError when the replica count is required
    (``TFD_REPLICAS_SOURCE=api``), else ``None`` and the error (a warning that names the holder
    without the token)."""
    try:
        state = _retrying(lambda: k8s.statefulset_state(env), "StatefulSet read at start",
                          ApiUnreachableError, stop, Log(None))  # fmt: skip
    except ContractError as err:
        if required:
            raise
        return None, str(err)
    return state, ""


def _retrying(
    call: Callable[[], T],
    what: str,
    transient: type[TrainerError],
    stop: StopSignal,
    log: Log,
    budget_s: float = API_RETRY_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``call()``, tried again while it raises ``transient``: after 1, 2, 4, 8, then every 10 s
    (the supervisor's schedule for waiting restarts, :func:`waiting_pause`), each failure a
    ``warning``, for up to ``budget_s``; then its last error.

    Raises:
        RestartRequested: SIGTERM while waiting for the next try (exit 76).
    """
    deadline = clock() + budget_s
    tries = 0
    while True:
        try:
            return call()
        except transient as err:
            pause = waiting_pause(1.0, tries)
            tries += 1
            if clock() + pause > deadline:
                raise
            log.event("warning", message=f"{what} failed; next try in {pause:g} s: {err}")
            if stop.event.wait(pause):  # terminated meanwhile: no more tries
                raise RestartRequested(
                    f"stopped (SIGTERM) while the {what} was failing: {err}"
                ) from None


def _ordinal(env: Mapping[str, str]) -> int:
    return contract.ordinal_from_pod_name(
        env.get(contract.ENV_POD_NAME, "").strip(), env.get(contract.ENV_STATEFULSET, "").strip()
    )


def _template_replicas(env: Mapping[str, str]) -> int | None:
    """``TFD_REPLICAS`` of this pod's template; ``None`` when unset or not a number (the
    cluster spec's own check then names it)."""
    with contextlib.suppress(ValueError):
        return int(env.get(contract.ENV_REPLICAS, "").strip())
    return None


def _supervisor_restarts(env: Mapping[str, str]) -> int:
    with contextlib.suppress(ValueError):
        return max(0, int(env.get(contract.ENV_SUPERVISOR_RESTARTS, "0") or 0))
    return 0


def _surplus(
    env: Mapping[str, str],
    replicas: int,
    metrics: Metrics,
    stop: StopSignal,
    source: str = "live replicas",
) -> int:
    ordinal = _ordinal(env)
    log = Log(ordinal)
    metrics.place(ordinal, replicas)
    metrics.ready = True
    log.event("surplus", reason=f"ordinal {ordinal} >= {source} {replicas}: the "
              "StatefulSet is scaling down; waiting for termination")  # fmt: skip
    stop.event.wait()
    return EXIT_OK


def _after_done(
    config: Config,
    env: Mapping[str, str],
    metrics: Metrics,
    stop: StopSignal,
    log: Log,
    scale: bool,
) -> int:
    """``--on-done``: exit, or (scale to zero and) wait for SIGTERM serving metrics.

    Raises:
        ApiError: the scale PATCH failed for good (exit 7, the URL and the HTTP status in the
            line); one without an answer or with a 429/5xx one is tried again first.
    """
    metrics.completed.set(1)
    metrics.ready = True
    if config.on_done == contract.ON_DONE_EXIT:
        return EXIT_OK
    if config.on_done == contract.ON_DONE_SCALE_TO_ZERO and scale:
        url = _retrying(lambda: k8s.scale_to_zero(env), "scale to zero", ApiUnansweredError,
                        stop, log)  # fmt: skip
        log.event("scaled_to_zero", url=url, reason="run finished: StatefulSet replicas set to 0")
    why = {
        contract.ON_DONE_IDLE: "training complete; serving metrics until terminated",
        contract.ON_DONE_SCALE_TO_ZERO: "training complete; waiting for the scale-down",
    }[config.on_done]
    log.event("idle", reason=why)
    stop.event.wait()
    return EXIT_OK


def _leave_for_rollout(env: Mapping[str, str], stop: StopSignal, log: Log) -> int:
    """Delete this worker's pod (the controller recreates it from the new template) and wait
    for the kubelet's SIGTERM; then exit 76 (a checkpoint was written, restart me).

    Raises:
        ApiError: the DELETE failed for good (exit 7, the URL and the HTTP status in the line);
            one without an answer or with a 429/5xx one is tried again first.
    """
    url = _retrying(lambda: k8s.delete_own_pod(env), "deletion of this pod", ApiUnansweredError,
                    stop, log)  # fmt: skip
    log.event("pod_deleted", url=url, reason="rollout: waiting for termination")
    stop.event.wait()
    return EXIT_RESTART
