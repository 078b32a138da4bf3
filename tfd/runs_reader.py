"""``tfd runs``: the stack's runs, read from their records on the checkpoint storage.

The records live where only the pods can read them (the shared claim, or a bucket with the
workers' credentials), so the listing (``python -m trainer.run_list --json``, the trainer's
own reader) runs inside the cluster, with the user's own access and nothing new for the
workers:

- a worker is running: ``create pods/exec`` of the reader in its trainer container;
- none is (stopped at zero, done and scaled down): ``create pods`` of a short-lived reader pod
  made from the StatefulSet's own pod template (same image, env, volumes, securityContext and
  ServiceAccount) with the reader as its command, no ports, probes or GPUs, small requests and
  limits, ``restartPolicy: Never`` and ``activeDeadlineSeconds``; its log is read
  (``get pods/log``) and it is deleted afterwards, also on an error or Ctrl-C. Its
  ``app.kubernetes.io/component`` label differs from the workers', so it is outside the
  StatefulSet's selector: the StatefulSet, its Service, PodDisruptionBudget and autoscaler
  never count it, and the NetworkPolicies give it what every pod of the stack has (the
  default deny and DNS; with a bucket, HTTPS and the metadata server; a claim needs no
  traffic) and nothing only workers have (their port, the API server).
"""

from __future__ import annotations

import copy
import json
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from tfd.errors import ClusterError, UsageError, one_line
from tfd.kube import CONTAINER, TIMEOUT_S, _api_error

READER_COMMAND = ("python", "-m", "trainer.run_list", "--json")
"""The trainer image's run lister (``trainer/run_list.py``): one JSON document on stdout."""
COMPONENT_LABEL = "app.kubernetes.io/component"
"""Kubernetes' recommended component label; the workers' selector includes it."""
READER_COMPONENT = "runs-reader"
READER_DEADLINE_S = 180
"""``activeDeadlineSeconds`` of the reader pod: the kubelet stops it after this long whatever
happens to ``tfd`` (reading a bucket imports TensorFlow: seconds)."""
READER_REQUESTS = {"cpu": "100m", "memory": "256Mi"}
READER_LIMITS = {"cpu": "1", "memory": "1Gi"}
"""Capped at the worker's own limits: a namespace quota sized for the workers admits it."""
POLL_S = 1.0
DOCUMENT_VERSION = 1
"""``trainer.run_list.DOCUMENT_VERSION`` this reader understands."""


def _get(doc: Any, *keys: str) -> Any:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, Mapping) else None
    return doc


def running_worker(pods: list[Mapping[str, Any]]) -> str | None:
    """The first worker (lowest ordinal first, as ``Cluster.pods`` sorts) whose trainer
    container runs and that is not being deleted; ``None`` when none does."""
    for pod in pods:
        if _get(pod, "metadata", "deletionTimestamp") or _get(pod, "status", "phase") != "Running":
            continue
        for status in _get(pod, "status", "containerStatuses") or []:
            if status.get("name") == CONTAINER and _get(status, "state", "running") is not None:
                return str(pod["metadata"]["name"])
    return None


def _trainer(spec: Mapping[str, Any]) -> dict[str, Any]:
    containers = spec.get("containers") or []
    named = [c for c in containers if c.get("name") == CONTAINER]
    if not (named or containers):
        raise UsageError("the StatefulSet's pod template has no container")
    return dict((named or containers)[0])


def _smaller(ours: str, theirs: Any) -> str:
    from kubernetes.utils import parse_quantity

    try:
        return str(theirs) if parse_quantity(str(theirs)) < parse_quantity(ours) else ours
    except (ValueError, TypeError):
        return ours


def reader_pod(sts: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The reader pod made from ``sts``'s pod template (the module docstring says what changes).

    Raises:
        UsageError: the StatefulSet has no pod template with a container, or the reader's labels
            would still match the StatefulSet's selector.
    """
    template = copy.deepcopy(_get(sts, "spec", "template") or {})
    spec = dict(template.get("spec") or {})
    container = _trainer(spec)
    limits = dict(_get(container, "resources", "limits") or {})
    container.update(
        command=list(READER_COMMAND),
        args=[],
        resources={
            "requests": {k: _smaller(v, limits.get(k, v)) for k, v in READER_REQUESTS.items()},
            "limits": {k: _smaller(v, limits.get(k, v)) for k, v in READER_LIMITS.items()},
        },
    )
    for key in ("ports", "startupProbe", "livenessProbe", "readinessProbe", "lifecycle"):
        container.pop(key, None)
    spec.update(
        containers=[container],
        restartPolicy="Never",
        activeDeadlineSeconds=READER_DEADLINE_S,
        terminationGracePeriodSeconds=5,
    )
    # The GPU node selector: the reader needs no GPU node, and a GPU pool may be scaled to zero.
    # The tolerations stay: on a cluster of tainted GPU nodes only, the reader still schedules.
    for key in ("nodeSelector", "initContainers", "hostname", "subdomain"):
        spec.pop(key, None)
    labels = dict(_get(template, "metadata", "labels") or {})
    labels[COMPONENT_LABEL] = READER_COMPONENT
    selector = _get(sts, "spec", "selector", "matchLabels") or {}
    if selector and all(labels.get(k) == v for k, v in selector.items()):
        raise UsageError(
            f"the reader pod's labels {labels} match the StatefulSet's selector {selector}: "
            "it would be counted as a worker; not created"
        )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def parse_document(text: str, where: str) -> dict[str, Any]:
    """The reader's JSON document: the last line of ``text`` that is one (a log may hold other
    lines before it, e.g. TensorFlow's notices when it reads a bucket).

    Raises:
        ClusterError: no line is a document of a version this reader understands.
    """
    for line in reversed(text.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("runs"), list):
            if doc.get("version") != DOCUMENT_VERSION:
                raise ClusterError(
                    f"{where}: run records of version {doc.get('version')!r}; this tfd reads "
                    f"version {DOCUMENT_VERSION}"
                )
            return doc
    raise ClusterError(one_line(f"{where}: no run records in its output: {_failure(text)}"))


def _failure(text: str) -> str:
    """Why the reader failed, on one line: its own error line, or the last line it wrote."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if any("No module named trainer.run_list" in line for line in lines):
        return (
            "the image has no trainer.run_list (an image of another commit); run a "
            "current image (tfd submit --continue)"
        )
    mine = [line for line in lines if line.startswith("trainer.run_list: error:")]
    return (mine or lines or ["no output"])[-1]


class RunsReader:
    """Runs the reader in the cluster (module docstring). ``core``: a ``CoreV1Api``;
    ``stream``: ``kubernetes.stream.stream`` (tests pass a fake)."""

    def __init__(
        self,
        core: Any,
        namespace: str,
        *,
        stream: Callable[..., Any] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core = core
        self.namespace = namespace
        self._stream = stream
        self.sleep = sleep
        self.clock = clock

    def read(self, sts: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> dict[str, Any]:
        """The reader's document, with ``read_by`` (``exec <pod>`` or ``pod <name>``) added.

        Raises:
            ClusterError: a request was refused (the line names it and the HTTP status), the
                reader failed (its own line) or did not end within its deadline.
            UsageError: the StatefulSet's template has no container.
        """
        worker = running_worker(pods)
        if worker is not None:
            doc = self.exec_in(worker, _trainer(_get(sts, "spec", "template", "spec") or {}))
            return {**doc, "read_by": f"exec {worker}"}
        base = str(_get(sts, "metadata", "name") or "tfd")
        name = f"{base}-runs-{uuid.uuid4().hex[:6]}"
        return {**self.in_pod(reader_pod(sts, name)), "read_by": f"pod {name}"}

    def exec_in(self, pod: str, container: Mapping[str, Any]) -> dict[str, Any]:
        """Run the reader in ``pod``'s trainer container (``create pods/exec``)."""
        from kubernetes.client.rest import ApiException

        stream = self._stream
        if stream is None:
            from kubernetes.stream import stream
        what = f"create pods/exec {self.namespace}/{pod}"
        try:
            resp = stream(
                self.core.connect_get_namespaced_pod_exec,
                pod,
                self.namespace,
                container=str(container.get("name") or CONTAINER),
                command=list(READER_COMMAND),
                stderr=True,
                stdin=False,
                stdout=True,
                tty=False,
                _preload_content=False,
            )
            resp.run_forever(timeout=READER_DEADLINE_S)
            # timeout=0: what is buffered; a connection still open has not ended in time.
            out, err, ended = resp.read_stdout(timeout=0), resp.read_stderr(timeout=0), True
            if resp.is_open():
                ended = False
                resp.close()
        except ApiException as exc:
            raise _api_error(what, exc) from None
        except Exception as exc:  # noqa: BLE001 - websocket/urllib3 errors: no answer
            raise _api_error(what, exc) from None
        if not ended:
            raise ClusterError(f"{what}: the reader did not end within {READER_DEADLINE_S} s")
        try:
            code = resp.returncode
        except Exception as exc:  # noqa: BLE001 - an error channel without an exit code
            raise ClusterError(one_line(f"{what}: the reader failed: {exc!r}: {err}")) from None
        finally:
            resp.close()
        if code != 0:
            raise ClusterError(one_line(f"{what}: the reader exited {code}: {_failure(err)}"))
        return parse_document(out, what)

    def in_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Create the reader pod, wait for it to end, read its log; delete it however this
        ends."""
        name = pod["metadata"]["name"]
        where = f"reader pod {self.namespace}/{name}"
        try:
            self._call(f"create pod {self.namespace}/{name}", self.core.create_namespaced_pod,
                       self.namespace, pod)  # fmt: skip
        except ClusterError as err:
            if "exceeded quota" not in str(err):
                raise
            # Workers that crash-loop still hold the quota's pods: none runs to exec into.
            raise ClusterError(
                f"{err}; the workers' pods hold the namespace quota: tfd stop frees them"
            ) from None
        try:
            phase, reason = self._wait(name)
            log = self._log(name)
            if phase != "Succeeded":
                why = f" ({reason})" if reason else ""
                raise ClusterError(one_line(f"{where} {phase}{why}: {_failure(log)}"))
            return parse_document(log, where)
        finally:
            self._delete(name)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, _request_timeout=TIMEOUT_S, **kwargs)
        except Exception as err:  # noqa: BLE001 - ApiException or no answer: one line
            raise _api_error(what, err) from None

    def _plain(self, obj: Any) -> Any:
        """A client model as the API's JSON (camelCase), as ``kubectl get -o json`` shows it."""
        return self.core.api_client.sanitize_for_serialization(obj)

    def _wait(self, name: str) -> tuple[str, str]:
        """The pod's final phase and why; ``Pending`` with the scheduler's or kubelet's reason
        when it has not ended within the deadline (and a little more)."""
        end = self.clock() + READER_DEADLINE_S + 15
        reason = ""
        while True:
            obj = self._call(f"get pod {self.namespace}/{name}", self.core.read_namespaced_pod,
                             name, self.namespace)  # fmt: skip
            doc = obj if isinstance(obj, Mapping) else self._plain(obj)
            status = doc.get("status") or {}
            phase = str(status.get("phase") or "Pending")
            reason = _why(status) or reason
            if phase in ("Succeeded", "Failed"):
                return phase, reason if phase == "Failed" else ""
            if self.clock() >= end:
                return phase, f"not ended within {READER_DEADLINE_S} s" + (
                    f" ({reason})" if reason else ""
                )
            self.sleep(POLL_S)

    def _log(self, name: str) -> str:
        try:
            text = self.core.read_namespaced_pod_log(
                name, self.namespace, container=CONTAINER, _request_timeout=TIMEOUT_S
            )
        except Exception as err:  # noqa: BLE001 - ApiException or no answer
            if getattr(err, "status", None) in (400, 404):  # never started
                return ""
            raise _api_error(f"get pods/log {self.namespace}/{name}", err) from None
        return str(text or "")

    def _delete(self, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(
                name, self.namespace, grace_period_seconds=0, _request_timeout=TIMEOUT_S
            )
        except Exception as err:  # noqa: BLE001 - reported, never hiding the first error
            if getattr(err, "status", None) != 404:
                print(
                    f"tfd: warning: reader pod {self.namespace}/{name} not deleted "
                    f"({one_line(err, 200)}); it stops within {READER_DEADLINE_S} s: "
                    f"kubectl -n {self.namespace} delete pod {name}",
                    file=sys.stderr,
                    flush=True,
                )


def _why(status: Mapping[str, Any]) -> str:
    """The pod's reason on one line: unschedulable, a waiting container (image pull), the
    deadline, or a terminated container's exit."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"not scheduled: {condition.get('message') or condition.get('reason')}"
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        waiting, done = state.get("waiting") or {}, state.get("terminated") or {}
        if waiting.get("reason"):
            return f"{waiting['reason']}: {waiting.get('message') or ''}".rstrip(": ")
        if done:
            return f"exit {done.get('exitCode')} ({done.get('reason') or 'terminated'})"
    return str(status.get("reason") or "")
