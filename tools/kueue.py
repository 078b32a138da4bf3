"""Kueue's controller on this machine, against the e2e control plane (docs/e2e.md, "Kueue").

The controller (``make tools``: sigs.k8s.io/kueue, cmd/kueue) runs as a host process with the
cluster's admin kubeconfig, so it needs no RBAC, Service or Deployment. The API server calls
its webhooks by URL (``https://127.0.0.1:<port>/<path>``) with a CA made for the session
(``tools/pki.py``); the webhook configurations are Kueue's own manifests with the ``service:``
reference rewritten, keeping only the webhooks of what this Kueue serves: its own kinds, Pods and
StatefulSets (``integrations.frameworks: [statefulset]``; the pod integration comes with it). A
webhook of a disabled integration would answer 404 and, with ``failurePolicy: Fail``, refuse
every such object in the cluster.

:meth:`Kueue.stop` deletes the webhook configurations before it stops the process: a ``Fail``
pod webhook pointing at a dead server would refuse every later pod of the cluster.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tools import pki
from tools.node_host import free_port

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / ".tools"
KUEUE = TOOLS / "bin" / "kueue"
KUBECTL = TOOLS / "bin" / "kubectl"
KUBECONFIG = TOOLS / "kubeconfig"
CONTEXT = "tfd-e2e"
CRDS = TOOLS / "kueue" / "crds.yaml"
WEBHOOKS = TOOLS / "kueue" / "webhooks.yaml"
NAME_PREFIX = "kueue-"
"""What Kueue's kustomization prefixes its objects with (``kueue-mutating-webhook-...``)."""
FRAMEWORKS = ("statefulset",)
SERVED_RESOURCES = frozenset({"pods", "statefulsets"})
"""The integrations' resources whose webhooks are kept (besides Kueue's own group)."""
KUEUE_GROUP = "kueue.x-k8s.io"
SYSTEM_NAMESPACES = ("kube-system", "kueue-system")
"""Never managed: the namespaceSelector Kueue's kustomization gives the pod and StatefulSet
webhooks (config/components/webhook/kustomization.yaml)."""
METRICS_CERTS = Path("/etc/kueue/metrics/certs")
"""Without internal certificate management, cmd/kueue reads its metrics certificate from this
fixed path (no setting moves it); the session's serving pair is linked there."""
READY_S = 90


def served(webhook: dict[str, Any]) -> bool:
    """Whether this Kueue answers ``webhook``: its own kinds and the enabled integrations'."""
    for rule in webhook.get("rules", []):
        if KUEUE_GROUP in rule.get("apiGroups", []):
            return True
        if SERVED_RESOURCES & set(rule.get("resources", [])):
            return True
    return False


def webhook_configurations(manifests: str, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations, called by URL on ``port`` and trusting ``ca_pem``; only
    the served webhooks, the integrations' ones kept out of the system namespaces."""
    bundle = base64.b64encode(ca_pem).decode()
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        config = copy.deepcopy(doc)
        config["metadata"] = {"name": NAME_PREFIX + doc["metadata"]["name"]}
        hooks = []
        for hook in config.get("webhooks", []):
            if not served(hook):
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
            if KUEUE_GROUP not in hook["rules"][0].get("apiGroups", []):
                hook["namespaceSelector"] = {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": list(SYSTEM_NAMESPACES),
                        }
                    ]
                }
            hooks.append(hook)
        config["webhooks"] = hooks
        out.append(config)
    return out


def configuration(webhook: int, metrics: int, health: int, cert_dir: Path) -> dict[str, Any]:
    """The controller's Configuration: no leader election, our certificates, loopback ports."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics}"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "integrations": {"frameworks": list(FRAMEWORKS)},
        # The on-demand visibility API is an aggregated API server of its own: not needed here.
        "featureGates": {"VisibilityOnDemand": False},
    }


class Kueue:
    """The controller and its cluster objects: :meth:`start`, :meth:`stop`."""

    def __init__(self, directory: Path, kubeconfig: Path = KUBECONFIG) -> None:
        self.dir = directory
        self.kubeconfig = kubeconfig
        self.proc: subprocess.Popen[bytes] | None = None
        self.webhooks: list[dict[str, Any]] = []
        self.linked_metrics_certs = False

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [str(KUBECTL), "--kubeconfig", str(self.kubeconfig), "--context", CONTEXT, *args],
            input=stdin, capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:3])}: {result.stderr.strip()}")
        return result.stdout

    def start(self) -> None:
        """CRDs, certificates, the controller; then its webhooks, once it is ready.

        Raises:
            RuntimeError: a tool is missing, or Kueue did not become ready (its log says why).
        """
        for need in (KUEUE, CRDS, WEBHOOKS):
            if not need.exists():
                raise RuntimeError(f"{need} missing: run `make tools` (or `make e2e`)")
        # Server-side: the Workload CRD is larger than the last-applied annotation may be.
        self.kubectl("apply", "--server-side", "-f", str(CRDS))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(CRDS))
        certs = self.dir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        pair = pki.ca_and_server(certs, "kueue-webhook", ["IP:127.0.0.1", "DNS:localhost"])
        # controller-runtime's webhook server reads tls.crt/tls.key from certDir.
        for name, source in (("tls.crt", pair.cert), ("tls.key", pair.key)):
            (certs / name).unlink(missing_ok=True)
            (certs / name).symlink_to(source.name)
        if not METRICS_CERTS.exists():
            METRICS_CERTS.parent.mkdir(parents=True, exist_ok=True)
            METRICS_CERTS.symlink_to(certs)
            self.linked_metrics_certs = True
        port, metrics, health = free_port(), free_port(), free_port()
        config = self.dir / "config.yaml"
        config.write_text(yaml.safe_dump(configuration(port, metrics, health, certs)))
        self.log_path = self.dir / "kueue.log"
        log = self.log_path.open("wb")
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        self.proc = subprocess.Popen(
            [str(KUEUE), f"--config={config}", f"--kubeconfig={self.kubeconfig}"],
            cwd=self.dir, stdout=log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        started = time.monotonic()
        self._wait_ready(health, started)
        self.webhooks = webhook_configurations(WEBHOOKS.read_text(), port, pair.ca.read_bytes())
        self.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                           "items": self.webhooks}))  # fmt: skip
        self.ready_s = time.monotonic() - started

    def _wait_ready(self, health: int, started: float) -> None:
        url = f"http://127.0.0.1:{health}/readyz"
        while True:
            if self.proc is None or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"kueue exited before it was ready:\n{self.log()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() - started > READY_S:
                self.stop()
                raise RuntimeError(f"kueue not ready after {READY_S} s ({url}):\n{self.log()}")
            time.sleep(0.5)

    def log(self, lines: int = 40) -> str:
        path = getattr(self, "log_path", None)
        if path is None or not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """The webhook configurations first (nothing may call a stopped server), then the
        process; the CRDs and Kueue's objects stay (a fresh cluster each e2e run)."""
        for config in self.webhooks:
            kind = config["kind"].lower()
            name = config["metadata"]["name"]
            try:
                self.kubectl("delete", kind, name, "--ignore-not-found", "--wait=true")
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                print(f"kueue stop: {kind} {name} not deleted: {err}")
        self.webhooks = []
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.linked_metrics_certs:
            METRICS_CERTS.unlink(missing_ok=True)
            for parent in (METRICS_CERTS.parent, METRICS_CERTS.parent.parent):
                with contextlib.suppress(OSError):  # not empty: something else put files there
                    parent.rmdir()
            self.linked_metrics_certs = False
