"""The e2e stack through its whole life with the real engine: preview, up, no-diff, update,
secrets, destroy, up again (``Pulumi.e2e.yaml`` on the local cluster).

The tests of this module run in order and share one deployed stack.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from pulumi import automation as auto
from pulumi.automation._stack import ImportResource

from tests.e2e.conftest import rendered_resources
from tests.e2e.harness import KUBECONFIG, Kube, Project
from tools.training_impact import Impact
from trainer import contract

# The StatefulSet's provenance annotation (infra/provenance.py) changes with every setting; on
# its metadata, not the pod template, so it restarts no worker.
CONFIG_HASH_DIFF = f'metadata.annotations["{contract.CONFIG_HASH_ANNOTATION}"]'
NAMESPACE = "tfd-e2e"
STATEFULSET = "tfd-worker"
SELECTOR = "app.kubernetes.io/name=tf-distributed,app.kubernetes.io/instance=tfd"
GRAFANA_PASSWORD = "grafana-e2e-Pa55word-7f3c"
REGISTRY_PASSWORD = "registry-e2e-Pa55word-91ab"
# Generous bounds: a run here takes seconds; the provider's own awaits allow 10 minutes.
WELL_INSIDE_TIMEOUTS_S = 240

# Kubernetes API kind -> kubectl resource, for the rendered manifests.
KUBECTL_KIND = {
    "Namespace": "namespace",
    "ServiceAccount": "serviceaccount",
    "Role": "role.rbac.authorization.k8s.io",
    "RoleBinding": "rolebinding.rbac.authorization.k8s.io",
    "NetworkPolicy": "networkpolicy.networking.k8s.io",
    "Service": "service",
    "PersistentVolumeClaim": "persistentvolumeclaim",
    "StatefulSet": "statefulset.apps",
    "PodDisruptionBudget": "poddisruptionbudget.policy",
    "HorizontalPodAutoscaler": "horizontalpodautoscaler.autoscaling",
    "ResourceQuota": "resourcequota",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicy.admissionregistration.k8s.io",
    "ValidatingAdmissionPolicyBinding": (
        "validatingadmissionpolicybinding.admissionregistration.k8s.io"
    ),
}


def assert_subset(expected: Any, actual: Any, where: str) -> None:
    """Every field of ``expected`` is in ``actual`` with the same value (the server may add
    defaults, never change what was applied)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected a mapping, live has {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{where}.{key}: applied but missing on the cluster"
            assert_subset(value, actual[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), (
            f"{where}: expected {len(expected)} items, live has {actual!r}"
        )
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            assert_subset(e, a, f"{where}[{i}]")
    else:
        assert expected == actual, f"{where}: applied {expected!r}, live {actual!r}"


@pytest.fixture(scope="module")
def kubeconfig_text() -> str:
    return KUBECONFIG.read_text()


@pytest.fixture(scope="module")
def project(new_project: Callable[..., Project], kubeconfig_text: str) -> Project:
    """The e2e stack, configured as a user would: the kubeconfig and passwords as secrets."""
    stack = new_project("e2e")
    stack.set("kubeconfig", kubeconfig_text, secret=True)
    stack.set("grafanaAdminPassword", GRAFANA_PASSWORD, secret=True)
    stack.set("imageRegistryPassword", REGISTRY_PASSWORD, secret=True)
    return stack


@pytest.fixture(scope="module")
def first_preview(project: Project) -> Any:
    return project.preview()


@pytest.fixture(scope="module")
def first_up(project: Project, first_preview: Any) -> Any:
    return project.up()


def test_preview_plans_what_render_renders(first_preview: Any) -> None:
    planned = {(s.type, s.name) for s in first_preview.steps if s.type != "pulumi:pulumi:Stack"}
    ops = {s.op for s in first_preview.steps if s.type != "pulumi:pulumi:Stack"}
    rendered = {(r["type"], r["name"]) for r in rendered_resources("e2e")}
    assert planned == rendered, (
        f"planned, not rendered: {sorted(planned - rendered)}; "
        f"rendered, not planned: {sorted(rendered - planned)}"
    )
    assert ops == {"create"}, f"a new stack's preview should only create; got {ops}"


def test_up_creates_every_rendered_object_as_rendered(first_up: Any, kube: Kube) -> None:
    assert first_up.seconds < WELL_INSIDE_TIMEOUTS_S, f"pulumi up took {first_up.seconds:.0f} s"
    manifests = [r["inputs"] for r in rendered_resources("e2e") if "kind" in r["inputs"]]
    assert manifests, "the renderer produced no Kubernetes objects"
    for manifest in manifests:
        meta = manifest["metadata"]
        ident = f"{manifest['kind']}/{meta['name']}"
        live = kube.get(KUBECTL_KIND[manifest["kind"]], meta["name"], meta.get("namespace"))
        assert live is not None, f"{ident}: rendered but not on the cluster"
        # The digest of the configuration differs: the renderer has the stack file's settings,
        # this stack also the cluster's own (kubeconfig, addresses). Its own test is below.
        (meta.get("annotations") or {}).pop(contract.CONFIG_HASH_ANNOTATION, None)
        assert_subset({k: v for k, v in manifest.items() if k != "apiVersion"}, live, ident)


def test_up_records_its_provenance_as_outputs_and_on_the_statefulset(
    first_up: Any, project: Project, kube: Kube
) -> None:
    outputs = {k: v.value for k, v in project.outputs().items()}
    annotations = kube.get("statefulset.apps", STATEFULSET, NAMESPACE)["metadata"]["annotations"]
    assert annotations[contract.CONFIG_HASH_ANNOTATION] == outputs["configHash"], annotations
    assert len(outputs["configHash"]) == 64, outputs["configHash"]
    assert annotations[contract.SOURCE_COMMIT_ANNOTATION] == outputs["sourceCommit"], annotations


def test_workers_are_admitted_named_and_ready(first_up: Any, kube: Kube) -> None:
    pods = kube.items("pods", NAMESPACE, SELECTOR)
    names = sorted(p["metadata"]["name"] for p in pods)
    assert names == [f"{STATEFULSET}-0", f"{STATEFULSET}-1"], names
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["spec"]["hostname"] == name, f"pod {name}: hostname {pod['spec']['hostname']}"
        assert pod["spec"]["subdomain"] == "tfd-workers", f"pod {name}: {pod['spec']}"
        ready = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
        assert ready.get("Ready") == "True", f"pod {name} not Ready: {pod['status']}"
        assert pod["spec"]["nodeName"] == "tfd-cpu-0", f"pod {name} on {pod['spec']['nodeName']}"
    ns = kube.get("namespace", NAMESPACE)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # Pod Security admission really enforces there: a pod that breaks `restricted` is refused.
    refused = kube.run(
        "run", "psa-probe", "-n", NAMESPACE, "--image=tf-distributed-trainer:0.1.0",
        "--restart=Never", "--dry-run=server",
        check=False,
    )  # fmt: skip
    assert "violates PodSecurity" in refused and '"restricted:' in refused, refused


def test_no_changes_right_after_up(first_up: Any, project: Project) -> None:
    assert project.preview(expect_no_changes=True).impact is Impact.NONE
    project.refresh(expect_no_changes=True)


def test_no_changes_after_an_hpa_style_scale(first_up: Any, project: Project, kube: Kube) -> None:
    # The HPA writes spec.replicas through the scale subresource; so does `kubectl scale`.
    kube.run("scale", f"statefulset/{STATEFULSET}", "-n", NAMESPACE, "--replicas=3")
    kube.wait_for(
        "3 ready workers",
        lambda: kube.ready_replicas(STATEFULSET, NAMESPACE) == 3,
    )
    project.preview(expect_no_changes=True)
    project.refresh(expect_no_changes=True)
    live = kube.get("statefulset.apps", STATEFULSET, NAMESPACE)
    assert live["spec"]["replicas"] == 3, "pulumi reset the replica count the HPA owns"


def test_update_previews_exactly_the_change_and_up_applies_it(
    first_up: Any, project: Project, kube: Kube
) -> None:
    # A new image: the pod template changes (a rollout), nothing else; the HPA's count stays.
    project.set("imageReference", "tf-distributed-trainer:0.2.0")
    preview = project.preview()
    assert preview.impact is Impact.ROLLOUT, preview.impact
    changed = preview.changed()
    assert [(s.op, s.type, s.name) for s in changed] == [
        ("update", "kubernetes:apps/v1:StatefulSet", "workers")
    ], [(s.op, s.type, s.name, s.diffs) for s in changed]
    # The annotation carries the image for the rollout; TFD_IMAGE for the run manifest.
    env = kube.get("statefulset.apps", STATEFULSET, NAMESPACE)["spec"]["template"]["spec"][
        "containers"
    ][0]["env"]
    image_env = [e["name"] for e in env].index(contract.ENV_IMAGE)
    assert changed[0].detailed_diff == {
        CONFIG_HASH_DIFF: "update",  # provenance: another setting, another digest
        'spec.template.metadata.annotations["tf-distributed.io/image-id"]': "update",
        "spec.template.spec.containers[0].image": "update",
        f"spec.template.spec.containers[0].env[{image_env}].value": "update",
    }, changed[0].detailed_diff
    up = project.up()
    assert [(s.op, s.name) for s in up.changed()] == [("update", "workers")]
    live = kube.get("statefulset.apps", STATEFULSET, NAMESPACE)
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "tf-distributed-trainer:0.2.0"
    )
    assert live["spec"]["replicas"] == 3, "the update reset the replica count the HPA owns"
    project.preview(expect_no_changes=True)

    # More epochs change the run's target: a new size patch replaces the old one and sets the
    # count to `replicas` (what brings a finished run back; the HPA resizes from there).
    project.set("epochs", 5)
    preview = project.preview()
    # The new --epochs is a template change too: every worker restarts once, then resumes.
    assert preview.impact is Impact.ROLLOUT, preview.impact
    changed = {(s.op, s.type, s.name.split("-size-")[0]): s for s in preview.changed()}
    assert sorted(changed) == [
        ("create", "kubernetes:apps/v1:StatefulSetPatch", "workers"),
        ("delete", "kubernetes:apps/v1:StatefulSetPatch", "workers"),
        ("update", "kubernetes:apps/v1:StatefulSet", "workers"),
    ], [(s.op, s.type, s.name, s.diffs) for s in changed.values()]
    sts_diff = changed["update", "kubernetes:apps/v1:StatefulSet", "workers"].detailed_diff
    # args[3] is the value of --epochs.
    assert sts_diff == {
        CONFIG_HASH_DIFF: "update",
        "spec.template.spec.containers[0].args[3]": "update",
    }, sts_diff
    up = project.up()
    assert sorted((s.op, s.name.split("-size-")[0]) for s in up.changed()) == [
        ("create", "workers"), ("delete", "workers"), ("update", "workers"),
    ]  # fmt: skip
    live = kube.get("statefulset.apps", STATEFULSET, NAMESPACE)
    container = live["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][container["args"].index("--epochs") + 1] == "5", container["args"]
    assert live["spec"]["replicas"] == 2, "the new target's patch did not set the count"
    project.preview(expect_no_changes=True)


def test_state_and_outputs_hold_no_plaintext_secret(
    first_up: Any, project: Project, kubeconfig_text: str
) -> None:
    client_key = json.loads(kubeconfig_text)["users"][0]["user"]["client-key-data"]
    plaintexts = {
        "kubeconfig": kubeconfig_text,
        "kubeconfig client key": client_key,
        "kubeconfig client key (decoded)": base64.b64decode(client_key).decode().split("\n")[1],
        "Grafana password": GRAFANA_PASSWORD,
        "registry password": REGISTRY_PASSWORD,
    }
    state = project.export_text()
    outputs = project.cli("stack", "output", "--json")
    stack_file = project.stack_file_text()
    for what, text in plaintexts.items():
        assert text not in state, f"pulumi stack export holds the {what} in plaintext"
        assert text not in outputs, f"pulumi stack output holds the {what} in plaintext"
        assert text not in stack_file, f"Pulumi.e2e.yaml holds the {what} in plaintext"
    # The kubeconfig is in state, encrypted: the provider's input and output.
    assert '"ciphertext"' in state, "no encrypted secret in the state at all"


def test_bad_config_fails_with_the_programs_message_and_creates_nothing(
    new_project: Callable[..., Project], kubeconfig_text: str, kube: Kube
) -> None:
    bad = new_project("bad", stack_file="e2e")
    bad.set("kubeconfig", kubeconfig_text, secret=True)
    bad.set("namespace", "tfd-e2e-bad")
    bad.set("replicas", 0)
    for operation in (bad.preview, bad.up):
        with pytest.raises(auto.CommandError) as failed:
            operation()
        text = str(failed.value)
        assert "tf-distributed:replicas: must be an integer in [1, 1000]; got '0'" in text, text
        assert "Traceback" not in text, text
    assert kube.get("namespace", "tfd-e2e-bad") is None
    state = bad.stack.export_stack().deployment.get("resources") or []
    # The engine records the stack itself; the program registered nothing.
    assert [r["type"] for r in state] in ([], ["pulumi:pulumi:Stack"]), (
        f"a failed program left resources in the state: {[r['urn'] for r in state]}"
    )


def adopt_retained(project: Project) -> None:
    """docs/infra.md's adoption after a Retain destroy: the namespace as an existing one, an up
    without the claim (and what mounts it), the claim and the namespace imported into their
    places in the program, the namespace the stack's own again."""
    stack = project.stack.name
    prefix = f"urn:pulumi:{stack}::tf-distributed::"
    project.set("namespaceMode", "existing")
    project.up(
        exclude=[f"{prefix}tfd:infra:Workers$kubernetes:core/v1:PersistentVolumeClaim::"
                 "workers-checkpoints"],
        exclude_dependents=True,
    )  # fmt: skip
    project.stack.import_resources(
        resources=[
            ImportResource(
                type="kubernetes:core/v1:PersistentVolumeClaim",
                name="workers-checkpoints",
                id=f"{NAMESPACE}/tfd-checkpoints",
                parent="workers-component",
                provider="provider",
            ),
            ImportResource(
                type="kubernetes:core/v1:Namespace",
                name="training",
                id=NAMESPACE,
                parent="training-component",
                provider="provider",
            ),
        ],
        name_table={
            "workers-component": f"{prefix}tfd:infra:Workers::workers",
            "training-component": f"{prefix}tfd:infra:TrainingNamespace::training",
            "provider": f"{prefix}pulumi:providers:kubernetes::kubernetes",
        },
        protect=False,
        generate_code=False,
    )
    project.set("namespaceMode", "create")


def test_destroy_keeps_what_config_retains_and_up_again_works(
    first_up: Any, project: Project, kube: Kube
) -> None:
    claim = kube.get("persistentvolumeclaim", "tfd-checkpoints", NAMESPACE)
    volume = claim["spec"]["volumeName"]
    project.destroy()
    # checkpointRetention: Retain keeps the claim and the namespace that holds it.
    assert kube.get("namespace", NAMESPACE) is not None
    kept = kube.get("persistentvolumeclaim", "tfd-checkpoints", NAMESPACE)
    assert kept is not None and kept["spec"]["volumeName"] == volume
    for kind in ("statefulset.apps", "service", "serviceaccount", "role", "rolebinding",
                 "networkpolicy", "horizontalpodautoscaler", "poddisruptionbudget",
                 "resourcequota"):  # fmt: skip
        left = [i["metadata"]["name"] for i in kube.items(kind, NAMESPACE)]
        if kind == "serviceaccount":
            left.remove("default")  # the namespace's own
        assert left == [], f"pulumi destroy left {kind}: {left}"
    guard = f"{NAMESPACE}.{STATEFULSET}.scale-to-zero"
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        assert kube.get(KUBECTL_KIND[kind], guard) is None, f"pulumi destroy left {kind} {guard}"
    kube.wait_for("worker pods gone", lambda: kube.items("pods", NAMESPACE, SELECTOR) == [])

    # The provider refuses to create the kept namespace and claim (AlreadyExists): adopt them
    # with docs/infra.md's commands (checkpoint retention), then `up` uses the same volume.
    adopt_retained(project)
    again = project.up()
    assert again.changed(), "the second up created nothing"
    claim = kube.get("persistentvolumeclaim", "tfd-checkpoints", NAMESPACE)
    assert claim["spec"]["volumeName"] == volume, "the retained checkpoints were not reused"
    kube.wait_for(
        "workers ready after the second up",
        lambda: kube.ready_replicas(STATEFULSET, NAMESPACE) == 2,
    )

    # With checkpointRetention Delete, destroy removes the namespace and the claim too.
    project.set("checkpointRetention", "Delete")
    project.up()
    project.destroy()
    kube.wait_for("namespace deleted", lambda: kube.get("namespace", NAMESPACE) is None, 180)
