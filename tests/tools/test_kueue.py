"""Kueue on the host (``tools/kueue.py``): its webhook configurations call it by URL with the
session CA, keep only what this Kueue serves (a webhook of a disabled integration would answer
404 and, failing closed, refuse every such object in the cluster), and its Configuration."""

from __future__ import annotations

import base64

import pytest

from tools import kueue

MANIFESTS = """\
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
{hooks}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig:
    service: {{name: webhook-service, namespace: system, path: /validate--v1-pod}}
  failurePolicy: Fail
  name: vpod.kb.io
  rules:
  - {{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}}
  sideEffects: None
"""


def hook(name: str, group: str, resource: str) -> str:
    return (
        f"- admissionReviewVersions: [v1]\n"
        f"  clientConfig:\n"
        f"    service: {{name: webhook-service, namespace: system, path: /mutate-{resource}}}\n"
        f"  failurePolicy: Fail\n"
        f"  name: {name}\n"
        f"  rules:\n"
        f'  - {{apiGroups: ["{group}"], apiVersions: [v1], operations: [CREATE], '
        f"resources: [{resource}]}}\n"
        f"  sideEffects: None"
    )


HOOKS = {
    "mpod.kb.io": ("", "pods"),
    "mstatefulset.kb.io": ("apps", "statefulsets"),
    "mworkload.kb.io": ("kueue.x-k8s.io", "workloads"),
    "mclusterqueue.kb.io": ("kueue.x-k8s.io", "clusterqueues"),
    "mjob.kb.io": ("batch", "jobs"),
    "mdeployment.kb.io": ("apps", "deployments"),
    "mrayjob.kb.io": ("ray.io", "rayjobs"),
}


@pytest.fixture(scope="module")
def configs() -> dict[str, dict]:
    text = MANIFESTS.format(hooks="\n".join(hook(n, g, r) for n, (g, r) in HOOKS.items()))
    out = kueue.webhook_configurations(text, 9555, b"-----CA-----\n")
    return {c["metadata"]["name"]: c for c in out}


def test_configurations_are_named_as_kueues_kustomization_names_them(configs: dict) -> None:
    assert sorted(configs) == [
        "kueue-mutating-webhook-configuration",
        "kueue-validating-webhook-configuration",
    ]


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("mpod.kb.io", True),
        ("mstatefulset.kb.io", True),
        ("mworkload.kb.io", True),
        ("mclusterqueue.kb.io", True),
        # Integrations this Kueue does not enable: no handler behind them.
        ("mjob.kb.io", False),
        ("mdeployment.kb.io", False),
        ("mrayjob.kb.io", False),
    ],
)
def test_only_the_served_webhooks_are_kept(configs: dict, name: str, kept: bool) -> None:
    names = [h["name"] for h in configs["kueue-mutating-webhook-configuration"]["webhooks"]]
    assert (name in names) is kept, f"{name}: kept={name in names}, want {kept} ({names})"


def test_kept_webhooks_call_loopback_by_url_trusting_the_session_ca(configs: dict) -> None:
    bundle = base64.b64encode(b"-----CA-----\n").decode()
    for config in configs.values():
        for h in config["webhooks"]:
            path = "/validate--v1-pod" if h["name"] == "vpod.kb.io" else None
            want = f"https://127.0.0.1:9555{path or '/mutate-' + h['rules'][0]['resources'][0]}"
            assert h["clientConfig"] == {"url": want, "caBundle": bundle}, h["name"]


@pytest.mark.parametrize(
    ("name", "selected"),
    [("mpod.kb.io", True), ("mstatefulset.kb.io", True), ("mworkload.kb.io", False)],
)
def test_integration_webhooks_stay_out_of_the_system_namespaces(
    configs: dict, name: str, selected: bool
) -> None:
    (h,) = [h for h in configs["kueue-mutating-webhook-configuration"]["webhooks"]
            if h["name"] == name]  # fmt: skip
    if not selected:
        assert "namespaceSelector" not in h, name
        return
    (expr,) = h["namespaceSelector"]["matchExpressions"]
    assert expr == {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": ["kube-system", "kueue-system"],
    }, name


def test_configuration_serves_on_loopback_without_leader_election(tmp_path) -> None:  # noqa: ANN001
    config = kueue.configuration(9443, 9444, 9445, tmp_path)
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["integrations"] == {"frameworks": ["statefulset"]}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"port": 9443, "host": "127.0.0.1", "certDir": str(tmp_path)}
    assert config["metrics"]["bindAddress"] == "127.0.0.1:9444"
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:9445"


class FakeProcess:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def poll(self) -> None:
        return None

    def terminate(self) -> None:
        self.calls.append("terminate")

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_stop_deletes_the_webhooks_before_it_stops_the_server(
    tmp_path,
    monkeypatch: pytest.MonkeyPatch,  # noqa: ANN001
) -> None:
    # A Fail-policy pod webhook pointing at a dead server would refuse every later pod.
    calls: list[str] = []
    controller = kueue.Kueue(tmp_path)
    monkeypatch.setattr(controller, "kubectl", lambda *args, **_: calls.append(" ".join(args)))
    controller.proc = FakeProcess(calls)  # type: ignore[assignment]
    controller.webhooks = kueue.webhook_configurations(
        MANIFESTS.format(hooks=hook("mpod.kb.io", "", "pods")), 9555, b"ca"
    )
    controller.stop()
    assert calls == [
        "delete mutatingwebhookconfiguration kueue-mutating-webhook-configuration "
        "--ignore-not-found --wait=true",
        "delete validatingwebhookconfiguration kueue-validating-webhook-configuration "
        "--ignore-not-found --wait=true",
        "terminate",
    ], calls
