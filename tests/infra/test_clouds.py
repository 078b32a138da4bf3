"""``clusterKind`` names the cloud: its GPU, storage and registry conventions fill the keys left
at their defaults, a key set in the stack wins, and every named cloud is a cloud."""

from __future__ import annotations

import pytest
import yaml

from infra.config import CLOUDS, PROJECT, PROJECT_FILE, ConfigError, Toleration, parse_config
from tools.render import STACKS, render_stack, stack_config

P = f"{PROJECT}:"
ROOT = PROJECT_FILE.parent

# (stack, node selector, tolerations as the pod carries them, storage class)
CONVENTIONS = [
    (
        "gke",
        (("cloud.google.com/gke-accelerator", None),),
        (
            {
                "key": "nvidia.com/gpu",
                "operator": "Equal",
                "value": "present",
                "effect": "NoSchedule",
            },
        ),
        "standard-rwx",
    ),
    (
        "eks",
        (("k8s.amazonaws.com/accelerator", None),),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
        "efs-sc",
    ),
    ("aks", (("kubernetes.azure.com/accelerator", "nvidia"),), (), "azurefile-csi"),
]


def test_every_named_cloud_has_an_example_stack() -> None:
    assert set(CLOUDS) <= set(STACKS), f"tools.render.STACKS {STACKS} lacks {set(CLOUDS)}"
    for name in CLOUDS:
        assert (ROOT / f"Pulumi.{name}.yaml").is_file(), f"Pulumi.{name}.yaml missing"


@pytest.mark.parametrize(
    ("stack", "selector", "tolerations", "storage_class"),
    CONVENTIONS,
    ids=[c[0] for c in CONVENTIONS],
)
def test_a_cloud_stack_takes_its_clouds_conventions(stack, selector, tolerations, storage_class):
    cfg = parse_config(*stack_config(stack), {})
    assert cfg.cluster.kind == stack and cfg.cluster.is_cloud, f"{stack}: cluster kind"
    assert cfg.workers.gpu_node_selector == selector, f"{stack}: gpuNodeSelector"
    got = tuple(t.manifest() for t in cfg.workers.gpu_tolerations)
    assert got == tolerations, f"{stack}: gpuTolerations"
    assert cfg.storage.storage_class == storage_class, f"{stack}: checkpointStorageClass"


@pytest.mark.parametrize("stack", sorted(CLOUDS))
def test_a_key_set_in_the_stack_wins_over_the_clouds_convention(stack):
    overrides = {
        P + "gpuNodeSelector": ["pool=gpu"],
        P + "gpuTolerations": ["sku=gpu:NoSchedule"],
        P + "checkpointStorageClass": "premium-rwx",
    }
    cfg = parse_config(*stack_config(stack, overrides), {})
    assert cfg.workers.gpu_node_selector == (("pool", "gpu"),), f"{stack}: gpuNodeSelector"
    assert cfg.workers.gpu_tolerations == (Toleration("sku", "gpu", "NoSchedule"),), stack
    assert cfg.storage.storage_class == "premium-rwx", f"{stack}: checkpointStorageClass"


def test_the_generic_cloud_keeps_the_declared_defaults():
    overrides = {P + "gpuNodeSelector": [], P + "gpuTolerations": []}
    cfg = parse_config(*stack_config("prod", overrides), {})
    assert (cfg.cluster.kind, cfg.cluster.is_cloud) == ("cloud", True)
    assert (cfg.workers.gpu_node_selector, cfg.workers.gpu_tolerations) == ((), ())


@pytest.mark.parametrize("stack", sorted(CLOUDS))
def test_a_named_cloud_needs_a_kube_context_as_the_generic_cloud_does(stack):
    with pytest.raises(ConfigError) as caught:
        parse_config(*stack_config(stack, {P + "kubeContext": ""}), {})
    assert f"{P}kubeContext: clusterKind '{stack}' needs a kube context" in str(caught.value)


@pytest.mark.parametrize("stack", sorted(CLOUDS))
def test_a_named_cloud_pins_a_prebuilt_image_by_digest(stack):
    with pytest.raises(ConfigError) as caught:
        parse_config(*stack_config(stack, {P + "imageReference": "r.io/trainer:1.0"}), {})
    assert f"must be pinned by digest ('...@sha256:<64 hex>') when clusterKind is '{stack}'" in (
        str(caught.value)
    )


def test_a_toleration_without_a_value_tolerates_any_value():
    """EKS taints GPU nodes nvidia.com/gpu=true, EKS Auto Mode nvidia.com/gpu without a value:
    'key:Effect' is operator Exists, which matches both."""
    cfg = parse_config(*stack_config("eks"), {})
    (toleration,) = cfg.workers.gpu_tolerations
    assert toleration.manifest() == {
        "key": "nvidia.com/gpu",
        "operator": "Exists",
        "effect": "NoSchedule",
    }


@pytest.fixture(scope="module")
def rendered():
    return {stack: render_stack(stack) for stack in sorted(CLOUDS)}


def _spec(rendered, stack):
    return rendered[stack].one("StatefulSet")["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("stack", "selector", "tolerations", "storage_class"),
    CONVENTIONS,
    ids=[c[0] for c in CONVENTIONS],
)
def test_the_workers_carry_the_clouds_gpu_placement(
    rendered, stack, selector, tolerations, storage_class
):
    spec = _spec(rendered, stack)
    exists = [k for k, v in selector if v is None]
    terms = (
        spec.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    want_terms = (
        [{"matchExpressions": [{"key": k, "operator": "Exists"} for k in exists]}] if exists else []
    )
    assert terms == want_terms, f"{stack}: node affinity {spec.get('affinity')}"
    assert spec.get("nodeSelector", {}) == {k: v for k, v in selector if v is not None}, stack
    assert tuple(spec.get("tolerations", ())) == tolerations, f"{stack}: tolerations"
    (claim,) = rendered[stack].by_kind("PersistentVolumeClaim")
    assert claim["spec"]["storageClassName"] == storage_class, f"{stack}: claim class"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"], f"{stack}: claim access"


@pytest.mark.parametrize("path", sorted(ROOT.glob("Pulumi.*.yaml")), ids=lambda p: p.name)
def test_no_stack_file_sets_the_debug_collective_timeout(path):
    """TensorFlow calls the collective timeout debugging-only (a thread per collective until a
    GPU pod reaches its PID limit, docs/trainer.md): no stack users copy may turn it on."""
    config = yaml.safe_load(path.read_text())["config"]
    assert P + "collectiveTimeoutSeconds" not in config, f"{path.name} sets it"
