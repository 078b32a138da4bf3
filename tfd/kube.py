"""The cluster, read and changed with the user's own access (the official ``kubernetes``
client), never the workers' ServiceAccount.

What ``tfd`` asks of the API server, all in the training namespace: ``get`` the worker
StatefulSet, ``list`` its pods and the namespace's events, ``get pods/log`` (the kubelet serves
the logs through the API server, so no NetworkPolicy changes and the workers get no new rights),
and for ``stop``/``submit`` a ``patch`` of the StatefulSet (its stop annotation) and of its
``scale`` subresource; ``runs`` adds ``create pods/exec`` or a reader pod's ``create``, ``get``
and ``delete`` (:mod:`tfd.runs_reader`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from tfd.errors import ClusterError, NodeUnreachableError, UsageError, one_line
from tfd.events import WorkerLog, parse_lines
from tfd.phase import Snapshot, ordinal

if TYPE_CHECKING:  # the client loads lazily: tfd's commands start fast
    from kubernetes.client.rest import ApiException

CONTAINER = "trainer"
"""The workers' container (``infra.pod.CONTAINER_NAME``; importing that module would load the
whole Pulumi Kubernetes SDK into every ``tfd status``)."""
FIELD_MANAGER = "tfd"
"""The field manager of tfd's writes: its fields on the StatefulSet are told apart from the
program's (``pulumi up`` leaves them alone) and the trainer's."""
TIMEOUT_S = 15
LOG_TAIL = 300
"""Lines of each worker's log read for ``status``."""
MAX_LOGS = 16
"""``status`` reads the logs of at most this many workers (the chief first): a big run's
progress is the chief's, and each log is one request."""


@dataclass(frozen=True)
class Access:
    """How to reach the stack's cluster: a kube context (from ``$KUBECONFIG`` or
    ``~/.kube/config``) and/or the stack's own kubeconfig (secret config; never printed)."""

    context: str | None
    kubeconfig: str | None = None

    def __repr__(self) -> str:  # the kubeconfig holds credentials: never in a message
        secret = "<secret>" if self.kubeconfig else None
        return f"Access(context={self.context!r}, kubeconfig={secret})"


def _api_error(what: str, err: Exception) -> ClusterError:
    status = getattr(err, "status", None)
    if status is not None:
        reason = getattr(err, "reason", "")
        body = getattr(err, "body", "") or ""
        try:
            message = yaml.safe_load(body).get("message", "") if body else ""
        except (yaml.YAMLError, AttributeError):
            message = ""
        return ClusterError(one_line(f"{what}: HTTP {status} {reason}: {message or body}"))
    return ClusterError(one_line(f"{what}: cannot reach the cluster: {err}"))


def _log_error(what: str, err: ApiException) -> ClusterError:
    """A log read's error: a 5xx is the API server's proxy to the node's kubelet failing."""
    error = _api_error(what, err)
    if err.status is not None and err.status >= 500:
        return NodeUnreachableError(str(error))
    return error


class Cluster:
    """One run's objects on the cluster: the namespace and worker StatefulSet of a stack."""

    def __init__(self, api: Any, namespace: str, statefulset: str) -> None:
        from kubernetes import client

        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.namespace = namespace
        self.name = statefulset

    @classmethod
    def connect(cls, access: Access, namespace: str, statefulset: str) -> Cluster:
        """Raises: UsageError: the context is not in the kubeconfig, or it is not one."""
        from kubernetes import client
        from kubernetes import config as kconfig

        configuration = client.Configuration()
        try:
            if access.kubeconfig:
                kconfig.load_kube_config_from_dict(
                    yaml.safe_load(access.kubeconfig),
                    context=access.context,
                    client_configuration=configuration,
                )
            else:
                kconfig.load_kube_config(context=access.context, client_configuration=configuration)
        except (kconfig.ConfigException, yaml.YAMLError, TypeError, AttributeError) as err:
            where = "the stack's kubeconfig" if access.kubeconfig else "$KUBECONFIG/~/.kube/config"
            raise UsageError(
                one_line(f"kube context {access.context!r} in {where}: {err}")
            ) from None
        return cls(client.ApiClient(configuration), namespace, statefulset)

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.rest import ApiException

        try:
            return fn(*args, _request_timeout=TIMEOUT_S, **kwargs)
        except ApiException as err:
            raise _api_error(what, err) from None
        except Exception as err:  # noqa: BLE001 - urllib3/socket errors: no answer
            raise _api_error(what, err) from None

    def _plain(self, obj: Any) -> Any:
        return self.api.sanitize_for_serialization(obj)

    def statefulset(self) -> dict[str, Any] | None:
        from kubernetes.client.rest import ApiException

        what = f"get statefulset {self.namespace}/{self.name}"
        try:
            obj = self.apps.read_namespaced_stateful_set(
                self.name, self.namespace, _request_timeout=TIMEOUT_S
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise _api_error(what, err) from None
        except Exception as err:  # noqa: BLE001 - no answer
            raise _api_error(what, err) from None
        return self._plain(obj)

    def pods(self, sts: Mapping[str, Any]) -> list[dict[str, Any]]:
        labels = (sts.get("spec") or {}).get("selector", {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        out = self._call(
            f"list pods in {self.namespace}",
            self.core.list_namespaced_pod,
            self.namespace,
            label_selector=selector,
        )
        return sorted(self._plain(out).get("items", []), key=ordinal)

    def events(self) -> list[dict[str, Any]]:
        out = self._call(
            f"list events in {self.namespace}", self.core.list_namespaced_event, self.namespace
        )
        return self._plain(out).get("items", [])

    def log(
        self,
        pod: str,
        *,
        previous: bool = False,
        tail: int | None = LOG_TAIL,
        since_s: int | None = None,
        timestamps: bool = False,
    ) -> list[str]:
        """A container's log lines; an empty list when the container has none (yet)."""
        from kubernetes.client.rest import ApiException

        kwargs: dict[str, Any] = {
            "container": CONTAINER,
            "previous": previous,
            "timestamps": timestamps,
        }
        if tail is not None:
            kwargs["tail_lines"] = tail
        if since_s is not None:
            kwargs["since_seconds"] = since_s
        try:
            text = self.core.read_namespaced_pod_log(
                pod, self.namespace, _request_timeout=TIMEOUT_S, **kwargs
            )
        except ApiException as err:
            if err.status in (400, 404):  # not started yet, no previous instance, pod gone
                return []
            raise _log_error(f"get pods/log {self.namespace}/{pod}", err) from None
        except Exception as err:  # noqa: BLE001 - no answer
            raise _api_error(f"get pods/log {self.namespace}/{pod}", err) from None
        return str(text or "").splitlines()

    def snapshot(self, deploying: bool = False) -> Snapshot:
        """Everything :func:`tfd.phase.derive` needs, read now."""
        sts = self.statefulset()
        if sts is None:
            return Snapshot(None, deploying=deploying)
        pods = self.pods(sts)
        logs: dict[int, WorkerLog] = {}
        unreadable: dict[int, str] = {}
        for pod in pods[:MAX_LOGS]:
            name, n = pod["metadata"]["name"], ordinal(pod)
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            if not statuses:
                continue
            restarted = any(s.get("restartCount") for s in statuses)
            try:
                current = parse_lines(self.log(name))
            except NodeUnreachableError as err:
                unreadable[n] = str(err)
                continue
            previous = []
            if restarted:
                try:
                    previous = parse_lines(self.log(name, previous=True, tail=50))
                except NodeUnreachableError as err:
                    unreadable[n] = str(err)
            logs[n] = WorkerLog(n, current, previous)
        return Snapshot(sts, pods, self.events(), logs, deploying=deploying, unreadable=unreadable)

    def patch_annotations(self, annotations: Mapping[str, str | None]) -> None:
        """Set (or, for ``None``, remove) annotations of the StatefulSet."""
        self._call(
            f"patch statefulset {self.namespace}/{self.name}",
            self.apps.patch_namespaced_stateful_set,
            self.name,
            self.namespace,
            {"metadata": {"annotations": dict(annotations)}},
            field_manager=FIELD_MANAGER,
        )

    def scale(self, replicas: int) -> None:
        """Set the StatefulSet's ``spec.replicas`` through its ``scale`` subresource."""
        self._call(
            f"patch statefulset {self.namespace}/{self.name}/scale",
            self.apps.patch_namespaced_stateful_set_scale,
            self.name,
            self.namespace,
            {"spec": {"replicas": replicas}},
            field_manager=FIELD_MANAGER,
        )

    def delete_pod(self, pod: str) -> None:
        """Delete one worker pod (the controller recreates it from the current template)."""
        self._call(
            f"delete pod {self.namespace}/{pod}",
            self.core.delete_namespaced_pod,
            pod,
            self.namespace,
        )

    def stream(self, pod: str, since_s: int | None, stop: Callable[[], bool]) -> Iterator[str]:
        """Follow one container's log (with timestamps) until it ends or ``stop()``."""
        from kubernetes.client.rest import ApiException

        kwargs: dict[str, Any] = {
            "container": CONTAINER,
            "follow": True,
            "timestamps": True,
            "_preload_content": False,
        }
        if since_s is not None:
            kwargs["since_seconds"] = max(1, since_s)
        try:
            resp = self.core.read_namespaced_pod_log(pod, self.namespace, **kwargs)
        except ApiException as err:
            if err.status in (400, 404):
                return
            raise _log_error(f"get pods/log {self.namespace}/{pod}", err) from None
        except Exception as err:  # noqa: BLE001 - no answer
            raise _api_error(f"get pods/log {self.namespace}/{pod}", err) from None
        buffer = b""
        try:
            for chunk in resp.stream(4096):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", "replace")
                if stop():
                    return
            if buffer:
                yield buffer.decode("utf-8", "replace")
        except Exception:  # noqa: BLE001 - the stream broke (pod gone, connection): caller retries
            return
        finally:
            resp.release_conn()


def wait(seconds: float, stop: Callable[[], bool]) -> None:
    """Sleep ``seconds`` in short steps, returning early once ``stop()``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stop():
        time.sleep(min(0.2, max(end - time.monotonic(), 0)))
