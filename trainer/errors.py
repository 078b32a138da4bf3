"""The trainer's exception tree and the process exit codes each error maps to.

Exit codes are part of the pod contract: Kubernetes restarts a worker whatever the code, but the
local launcher, logs and alerts read them. Any other exception (a bug, or a TensorFlow error with
no mapping such as out-of-memory) exits with ``EXIT_UNEXPECTED`` after a traceback on stderr.
Imports no TensorFlow.
"""

from __future__ import annotations

import re

EXIT_OK = 0
"""Training finished (or was already finished)."""
EXIT_UNEXPECTED = 1
"""An unexpected error (not a ``TrainerError``): traceback on stderr; a bug report needs it."""
EXIT_USAGE = 2
"""Bad command-line flags (argparse's own code)."""
EXIT_CONTRACT = 3
"""The pod environment contract is inconsistent (no ordinal, ordinal >= replicas, bad port...)."""
EXIT_DATA = 4
"""The dataset cannot be read or has the wrong shape."""
EXIT_CHECKPOINT = 5
"""The run directory failed: no checkpoint restores (corrupt or saved by another model; an
intact older one is used first), the directory cannot be read, or a write into it failed (a
checkpoint, the final model, ``summary.json``, ``DONE``, the run manifest or the chief's lease;
``no space left on <path>`` for a full volume or quota). A failed checkpoint save leaves the
previous checkpoint the latest."""
EXIT_MODEL = 6
"""The ``--model module:function`` builder cannot be imported or returns no model."""
EXIT_API = 7
"""A Kubernetes API call the run's lifecycle needs failed (scale to zero, delete own pod): the
message names the URL and the HTTP status (403: the Role lacks ``contract.API_CALLS``)."""
EXIT_DIVERGED = 8
"""The training loss is not finite (NaN or infinity): training stopped before saving anything
after that step, so the latest checkpoint is still a good one. A restart from it would diverge
again at the same place: change the learning rate or the data, under a new run id (the run
manifest records both)."""
EXIT_RUN_CONFLICT = 9
"""The run directory belongs to another run or another live chief: its run manifest records
settings that change the result, or another holder's lease has not expired (``trainer.manifest``,
``trainer.lease``). The line names the fields (old -> new) or the holder and the expiry; nothing
was written. Use a new run id, or wait for the lease to expire."""
FAILURE_EXIT_CODES = frozenset(range(EXIT_UNEXPECTED, EXIT_RUN_CONFLICT + 1))
"""The codes of a trainer that failed (``tfd`` reports the run failed, with the line the trainer
printed); the codes below are planned restarts, 137/143 a signal."""
EXIT_PEER_LOST = 75
"""A peer died or a collective timed out, or the cluster did not form in time (a peer that does
not resolve or answer within ``placement.FORM_TIMEOUT_S``, a registration with the chief that
timed out): restart every worker (EX_TEMPFAIL)."""
EXIT_RESTART = 76
"""Stopped on purpose, restart me: preempted (SIGTERM), the world size changed, or a rollout.
A worker that was training saved a checkpoint at the stop step first; one stopped before
training began (SIGTERM while waiting to be admitted, for its peers or for the API, or an
outdated pod leaving for a rollout at start) had nothing to save."""
EXIT_NOT_ADMITTED = 77
"""The running cluster has no place for this worker yet: it joined a resize before the others
stopped for the new world size. Try again after a pause (the supervisor's waiting restart)."""


class TrainerError(Exception):
    """Base of every error the trainer reports to the user; carries the process exit code."""

    exit_code: int = EXIT_UNEXPECTED


class UsageError(TrainerError):
    """Invalid flag values that argparse alone cannot reject."""

    exit_code = EXIT_USAGE


class ContractError(TrainerError):
    """The environment the StatefulSet (or the local launcher) gave the pod is inconsistent."""

    exit_code = EXIT_CONTRACT


class GpuMissingError(ContractError):
    """The pod was given GPUs (``TFD_GPUS``) that TensorFlow cannot see: a driver, runtime or
    image problem of the node, never fixed by restarting the trainer."""


class ApiUnreachableError(ContractError):
    """The StatefulSet read found no answer (connection, DNS, timeout), an answer cut short or
    garbled on the wire (``http.client.HTTPException``, e.g. ``IncompleteRead``) or a 429/5xx
    one: worth another try, unlike a 403 or a complete answer that is malformed."""


class DataError(TrainerError):
    """The dataset is missing, unreadable, or not of the expected shape."""

    exit_code = EXIT_DATA


class CheckpointError(TrainerError):
    """No checkpoint restores, or the run directory cannot be read or written (see
    :data:`EXIT_CHECKPOINT`)."""

    exit_code = EXIT_CHECKPOINT


class ModelError(TrainerError):
    """The model builder cannot be loaded or does not return a model."""

    exit_code = EXIT_MODEL


class ApiError(TrainerError):
    """A Kubernetes API call of the lifecycle (PATCH scale, DELETE pod) failed."""

    exit_code = EXIT_API


class PeerLostError(TrainerError):
    """A collective failed because a peer stopped answering (heartbeat or collective timeout),
    or the cluster did not form in time."""

    exit_code = EXIT_PEER_LOST


class NotAdmittedError(TrainerError):
    """The chief's coordination service runs a cluster without this task (a resize the other
    workers have not stopped for yet)."""

    exit_code = EXIT_NOT_ADMITTED


class RestartRequested(TrainerError):  # noqa: N818 - a request, not a failure
    """The worker stopped on purpose (SIGTERM, new world size), at a checkpoint if it was
    training; restart to resume (see :data:`EXIT_RESTART`)."""

    exit_code = EXIT_RESTART


class RolloutRequested(RestartRequested):
    """Every worker stopped at a checkpoint because the StatefulSet has a new revision: each
    deletes its own pod so the controller recreates it from the new template."""


class DivergedError(TrainerError):
    """The loss of a training call is NaN or infinite."""

    exit_code = EXIT_DIVERGED


class ApiUnansweredError(ApiError):
    """A lifecycle call (PATCH scale, DELETE pod) found no answer (connection, DNS, timeout, a
    truncated answer) or a 429/5xx one: worth another try, unlike a 403. Exit 7 once the tries
    are spent."""


class RunConflictError(TrainerError):
    """The run directory's manifest or lease refuses this start (see :data:`EXIT_RUN_CONFLICT`)."""

    exit_code = EXIT_RUN_CONFLICT


_TF_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")
"""The ``{{function_node __wrapped__...}}`` prefix TensorFlow puts before an op's message."""


def first_line(err: BaseException) -> str:
    """The line of an error message that says what went wrong.

    TensorFlow's errors from a ``tf.function`` start with ``Graph execution error:`` and the
    Python stack of the failed op (``Detected at node ...``, indented ``File`` lines); the
    cause follows, e.g. ``Collective ops is aborted by: ... The following tasks are unhealthy
    (stopped sending heartbeats):`` with the task on the next line. Those headers, indented
    lines and the ``{{function_node ...}}`` prefix are skipped; a line ending in ``:`` is joined
    with the next one (the task it names).
    """
    text = getattr(err, "message", "") or str(err)
    lines = [
        _TF_FUNCTION_NODE.sub("", raw).strip()
        for raw in text.splitlines()
        if raw.strip()
        and not raw[0].isspace()
        and raw.strip() != "Graph execution error:"
        and not raw.startswith("Detected at node")
    ]
    if not lines:
        return text.strip().splitlines()[0] if text.strip() else type(err).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]
