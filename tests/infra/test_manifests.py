"""What each stack would apply, read from the rendered manifests of the real program."""

from __future__ import annotations

import posixpath

import pytest

from infra import workers
from infra.config import parse_config
from infra.pod import trainer_args, trainer_flags
from infra.stack import MONITORING_OUTPUTS
from tools.render import SECRET_TEXT, render_stack, stack_config
from trainer import contract

STACKS = ["dev", "prod"]


def _pod(rendered, stack):
    return rendered[stack].one("StatefulSet")["spec"]["template"]


def _container(rendered, stack):
    (container,) = _pod(rendered, stack)["spec"]["containers"]
    return container


def _env(rendered, stack) -> dict:
    return {
        e["name"]: e.get("value", e.get("valueFrom")) for e in _container(rendered, stack)["env"]
    }


def _ports(items, key="port") -> dict:
    return {p["name"]: p[key] for p in items}


def _peer_policy(result):
    """The one worker-to-worker NetworkPolicy of a rendered stack."""
    (policy,) = [
        p
        for p in result.by_kind("NetworkPolicy")
        if p["metadata"]["name"].endswith(("-workers-grpc", "-workers-nccl"))
    ]
    return policy


ALL_TCP = "all TCP"


@pytest.mark.parametrize("stack", STACKS)
def test_every_selector_matches_the_worker_pods(rendered, stack):
    labels = _pod(rendered, stack)["metadata"]["labels"]
    sts = rendered[stack].one("StatefulSet")
    selectors = {
        "StatefulSet": sts["spec"]["selector"]["matchLabels"],
        "Service": rendered[stack].one("Service")["spec"]["selector"],
        "PodDisruptionBudget": rendered[stack].one("PodDisruptionBudget")["spec"]["selector"][
            "matchLabels"
        ],
    }
    for policy in rendered[stack].by_kind("NetworkPolicy"):
        selector = policy["spec"]["podSelector"].get("matchLabels", {})
        selectors[f"NetworkPolicy/{policy['metadata']['name']}"] = selector
    for owner, selector in selectors.items():
        missing = {k: v for k, v in selector.items() if labels.get(k) != v}
        assert not missing, f"stack {stack}: {owner} selector {missing} not on pod labels"
    assert sts["spec"]["selector"]["matchLabels"], f"stack {stack}: empty StatefulSet selector"


@pytest.mark.parametrize("stack", STACKS)
def test_recommended_labels_on_every_object(rendered, stack):
    for manifest in rendered[stack].manifests:
        labels = manifest["metadata"].get("labels", {})
        for key in ("name", "instance", "component", "part-of", "managed-by"):
            assert f"app.kubernetes.io/{key}" in labels, (
                f"stack {stack}: {manifest['kind']}/{manifest['metadata']['name']} lacks {key}"
            )


@pytest.mark.parametrize("stack", STACKS)
def test_headless_service_is_the_statefulset_service(rendered, stack):
    sts = rendered[stack].one("StatefulSet")["spec"]
    svc = rendered[stack].one("Service")
    assert svc["metadata"]["name"] == sts["serviceName"], f"stack {stack}: serviceName mismatch"
    assert svc["spec"]["clusterIP"] == "None", f"stack {stack}: Service is not headless"
    assert svc["spec"]["publishNotReadyAddresses"] is True, f"stack {stack}: not-ready hidden"
    assert sts["podManagementPolicy"] == "Parallel", f"stack {stack}: OrderedReady deadlocks"


# Worker-to-worker ports per stack: gRPC only on CPU (dev); every TCP port where NCCL may run
# (prod: GPUs and collective nccl), because NCCL listens on ephemeral ports.
PEER_PORTS = {"dev": "grpc", "prod": ALL_TCP}


@pytest.mark.parametrize("stack", STACKS)
def test_ports_agree_across_objects_and_contract(rendered, stack):
    container = _container(rendered, stack)
    container_ports = _ports(container["ports"], "containerPort")
    service = rendered[stack].one("Service")["spec"]["ports"]
    env = _env(rendered, stack)
    grpc, metrics = (
        container_ports[contract.GRPC_PORT_NAME],
        container_ports[contract.METRICS_PORT_NAME],
    )
    assert _ports(service) == container_ports, f"stack {stack}: Service ports {service}"
    assert {p["targetPort"] for p in service} == set(container_ports), f"stack {stack}: targetPort"
    assert (env[contract.ENV_GRPC_PORT], env[contract.ENV_METRICS_PORT]) == (
        str(grpc),
        str(metrics),
    )
    peers = rendered[stack].by_kind("NetworkPolicy")
    peer_policy = _peer_policy(rendered[stack])
    expected = [{"protocol": "TCP", "port": grpc}]
    if PEER_PORTS[stack] == ALL_TCP:
        expected = [{"protocol": "TCP"}]  # no port: every TCP port
    for direction in ("ingress", "egress"):
        ports = [p for rule in peer_policy["spec"][direction] for p in rule["ports"]]
        assert ports == expected, f"stack {stack}: {direction} peer ports {ports}"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] == contract.METRICS_PORT_NAME, probe
    assert container["livenessProbe"]["httpGet"]["path"] == contract.LIVENESS_PATH
    assert container["readinessProbe"]["httpGet"]["path"] == contract.READINESS_PATH
    metrics_policies = [p for p in peers if p["metadata"]["name"].endswith("-metrics")]
    for policy in metrics_policies:
        ports = [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]
        assert ports == [metrics], f"stack {stack}: metrics ingress ports {ports}"


P = "tf-distributed:"


@pytest.mark.parametrize(
    ("stack", "overrides", "name", "ports"),
    [
        ("dev", {}, "tfd-workers-grpc", [{"protocol": "TCP", "port": 2222}]),
        ("dev", {P + "gpusPerWorker": 1}, "tfd-workers-nccl", [{"protocol": "TCP"}]),
        ("prod", {}, "tfd-workers-nccl", [{"protocol": "TCP"}]),
        ("prod", {P + "collective": "auto"}, "tfd-workers-nccl", [{"protocol": "TCP"}]),
        (
            "prod",
            {P + "collective": "ring"},
            "tfd-workers-grpc",
            [{"protocol": "TCP", "port": 2222}],
        ),
    ],
)
def test_worker_peer_ports_follow_gpus_and_collective(rendered, stack, overrides, name, ports):
    result = render_stack(stack, overrides) if overrides else rendered[stack]
    policy = _peer_policy(result)
    where = f"Pulumi.{stack}.yaml + {overrides}: NetworkPolicy {policy['metadata']['name']}"
    assert policy["metadata"]["name"] == name, where
    workers = {"matchLabels": result.one("StatefulSet")["spec"]["selector"]["matchLabels"]}
    spec = policy["spec"]
    assert spec["podSelector"] == workers, f"{where}: applies beyond the workers"
    assert spec["policyTypes"] == ["Ingress", "Egress"], where
    assert spec["ingress"] == [{"from": [{"podSelector": workers}], "ports": ports}], where
    assert spec["egress"] == [{"to": [{"podSelector": workers}], "ports": ports}], where


def test_hpa_targets_the_statefulset_only_when_enabled(rendered):
    hpa = rendered["dev"].one("HorizontalPodAutoscaler")
    sts = rendered["dev"].one("StatefulSet")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": sts["apiVersion"],
        "kind": "StatefulSet",
        "name": sts["metadata"]["name"],
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 3)
    assert rendered["prod"].by_kind("HorizontalPodAutoscaler") == []
    resources = _container(rendered, "dev")["resources"]
    assert resources["requests"]["cpu"], "the HPA's utilization needs a CPU request"


@pytest.mark.parametrize(("stack", "gpus"), [("dev", None), ("prod", 1)])
def test_gpu_limits_selector_and_tolerations_per_stack(rendered, stack, gpus):
    pod = _pod(rendered, stack)["spec"]
    limits = _container(rendered, stack)["resources"]["limits"]
    assert limits.get("nvidia.com/gpu") == gpus, f"stack {stack}: GPU limit {limits}"
    assert {"cpu", "memory"} <= set(limits), f"stack {stack}: limits {limits}"
    assert ("nodeSelector" in pod) == bool(gpus), f"stack {stack}: nodeSelector"
    assert ("tolerations" in pod) == bool(gpus), f"stack {stack}: tolerations"
    if gpus:
        assert pod["tolerations"] == [
            {
                "key": "nvidia.com/gpu",
                "operator": "Equal",
                "value": "present",
                "effect": "NoSchedule",
            }
        ]


@pytest.mark.parametrize(("stack", "pods"), [("dev", 3), ("prod", 4)])
def test_rbac_is_exactly_what_the_trainer_calls(rendered, stack, pods):
    (role,) = rendered[stack].by_kind("Role")
    names = [f"tfd-worker-{i}" for i in range(pods)]
    assert role["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["statefulsets"],
            "resourceNames": ["tfd-worker"],
            "verbs": ["get"],
        },
        {
            "apiGroups": ["apps"],
            "resources": ["statefulsets/scale"],
            "resourceNames": ["tfd-worker"],
            "verbs": ["patch"],
        },
        {"apiGroups": [""], "resources": ["pods"], "resourceNames": names, "verbs": ["delete"]},
    ], f"stack {stack}: Role {role['metadata']['name']}"
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == set(contract.API_CALLS), f"stack {stack}: {granted}"
    (binding,) = rendered[stack].by_kind("RoleBinding")
    sa = rendered[stack].one("ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": f"tfd-{stack}"}
    ]
    kinds = {m["kind"] for m in rendered[stack].manifests}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}, f"stack {stack}: cluster RBAC"


@pytest.mark.parametrize(("stack", "source"), [("dev", "api"), ("prod", "env")])
def test_api_access_on_every_stack(rendered, stack, source):
    env = _env(rendered, stack)
    pod = _pod(rendered, stack)["spec"]
    assert env[contract.ENV_REPLICAS_SOURCE] == source, f"stack {stack}"
    assert pod["automountServiceAccountToken"] is False
    assert rendered[stack].one("ServiceAccount")["automountServiceAccountToken"] is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    policies = {p["metadata"]["name"] for p in rendered[stack].by_kind("NetworkPolicy")}
    sources = volumes["api-token"]["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["path"] == "token"
    assert sources[0]["serviceAccountToken"]["expirationSeconds"] <= 3600
    assert sources[1]["configMap"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    (mount,) = [m for m in _container(rendered, stack)["volumeMounts"] if m["name"] == "api-token"]
    assert mount == {
        "name": "api-token",
        "mountPath": posixpath.dirname(contract.DEFAULT_API_TOKEN_PATH),
        "readOnly": True,
    }
    assert env[contract.ENV_API_TOKEN_PATH] == contract.DEFAULT_API_TOKEN_PATH
    assert env[contract.ENV_API_CA_PATH] == contract.DEFAULT_API_CA_PATH
    assert "tfd-api-server" in policies, f"stack {stack}: NetworkPolicies {sorted(policies)}"


@pytest.mark.parametrize("stack", STACKS)
def test_pod_environment_contract(rendered, stack):
    env = _env(rendered, stack)
    sts = rendered[stack].one("StatefulSet")
    assert env[contract.ENV_POD_NAME] == {
        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}
    }
    assert env[contract.ENV_NAMESPACE]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env[contract.ENV_STATEFULSET] == sts["metadata"]["name"]
    assert env[contract.ENV_SERVICE] == sts["spec"]["serviceName"]
    assert env[contract.ENV_REPLICAS] == str(sts["spec"]["replicas"])
    assert env[contract.ENV_CLUSTER_DOMAIN] == contract.DEFAULT_CLUSTER_DOMAIN
    assert env[contract.ENV_CHECKPOINT_DIR].startswith("/checkpoints/")
    assert env["HOME"] == "/tmp"
    assert contract.ENV_WORKER_HOSTS not in env and contract.ENV_TF_CONFIG not in env
    gpus = parse_config(*stack_config(stack), {}).workers.gpus
    # What the GPU limit gives, for the trainer to check against what TensorFlow sees.
    assert env.get(contract.ENV_GPUS) == (str(gpus) if gpus else None), f"stack {stack}"
    # The same environment, with a pod name filled in, yields a valid TF_CONFIG.
    pod_env = {k: v for k, v in env.items() if isinstance(v, str)}
    pod_env[contract.ENV_POD_NAME] = f"{sts['metadata']['name']}-1"
    pod_env[contract.ENV_NAMESPACE] = sts["metadata"]["namespace"]
    spec = contract.cluster_spec_from_env(pod_env)
    assert spec.task_index == 1 and spec.workers == tuple(
        rendered[stack].outputs["workerAddresses"]
    )


@pytest.mark.parametrize("stack", STACKS)
def test_container_sets_args_never_command(rendered, stack):
    container = _container(rendered, stack)
    assert "command" not in container, f"stack {stack}: the image ENTRYPOINT is the one definition"
    cfg = parse_config(*stack_config(stack), {})
    assert container["args"] == trainer_args(cfg.training)


@pytest.mark.parametrize("stack", STACKS)
def test_container_args_are_the_stack_flags(rendered, stack):
    """The trainer reads back exactly the flags the stack built, each one the stack sets
    written even at the trainer's default."""
    args = _container(rendered, stack)["args"]
    cfg = parse_config(*stack_config(stack), {})
    assert contract.TrainerFlags.from_argv(args) == trainer_flags(cfg.training)
    written = [a.removeprefix("--").replace("-", "_") for a in args if a.startswith("--")]
    assert written == [
        "dataset",
        "epochs",
        "batch_size",
        "steps_per_epoch",
        "checkpoint_every",
        "collective",
        "collective_timeout",
        "heartbeat_timeout",
        "on_done",
        "precision",
    ], f"stack {stack}: {args}"


@pytest.mark.parametrize("stack", STACKS)
def test_hardened_security_context(rendered, stack):
    pod = _pod(rendered, stack)["spec"]
    ctx = _container(rendered, stack)["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] >= 10000 and ctx["runAsUser"] >= 10000
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert ctx["readOnlyRootFilesystem"] is True and ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"] for m in _container(rendered, stack)["volumeMounts"]}
    assert "/tmp" in mounts, f"stack {stack}: no writable /tmp"
    assert pod["terminationGracePeriodSeconds"] >= 60


@pytest.mark.parametrize("stack", STACKS)
def test_namespace_enforces_restricted_pod_security(rendered, stack):
    namespaces = {n["metadata"]["name"]: n for n in rendered[stack].by_kind("Namespace")}
    labels = namespaces[f"tfd-{stack}"]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    for manifest in rendered[stack].manifests:
        if manifest["kind"] != "Namespace" and manifest["kind"] in {"StatefulSet", "Service"}:
            assert manifest["metadata"]["namespace"] == f"tfd-{stack}"


@pytest.mark.parametrize("stack", STACKS)
def test_shared_checkpoint_claim_and_pdb(rendered, stack):
    claim = rendered[stack].one("PersistentVolumeClaim")
    pod = _pod(rendered, stack)["spec"]
    sts = rendered[stack].one("StatefulSet")["spec"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == [claim["metadata"]["name"]]
    # Without volumeClaimTemplates a claim retention policy would do nothing: none is set.
    assert "persistentVolumeClaimRetentionPolicy" not in sts, f"stack {stack}"
    assert rendered[stack].one("PodDisruptionBudget")["spec"]["maxUnavailable"] == 0
    expected = {"dev": "standard", "prod": "standard-rwx"}[stack]
    assert claim["spec"]["storageClassName"] == expected


@pytest.mark.parametrize("stack", STACKS)
def test_network_policies_deny_by_default(rendered, stack):
    policies = {p["metadata"]["name"]: p["spec"] for p in rendered[stack].by_kind("NetworkPolicy")}
    deny = policies["tfd-default-deny"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    dns = policies["tfd-dns"]["egress"][0]
    assert dns["to"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "kube-system"
    }
    assert sorted(p["protocol"] for p in dns["ports"]) == ["TCP", "UDP"]
    # NodeLocal DNSCache and GKE's metadata-server DNS (Cloud DNS), on port 53 only.
    assert dns["to"][1:] == [
        {"ipBlock": {"cidr": "169.254.20.10/32"}},
        {"ipBlock": {"cidr": "169.254.169.254/32"}},
    ], f"stack {stack}: dns egress {dns['to']}"
    if stack == "prod":
        (rule,) = policies["tfd-metrics"]["ingress"]
        assert rule["from"] == [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ]
    else:
        assert "tfd-metrics" not in policies
        (rule,) = policies["tfd-api-server"]["egress"]
        assert [b["ipBlock"]["cidr"] for b in rule["to"]] == ["192.168.49.2/32", "10.96.0.1/32"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_kubernetes_resource_uses_the_explicit_provider(rendered, stack):
    providers = [r for r in rendered[stack].resources if r.type == "pulumi:providers:kubernetes"]
    assert [p.name for p in providers] == ["kubernetes"], f"stack {stack}: providers {providers}"
    for res in rendered[stack].resources:
        if res.type.startswith("kubernetes:"):
            assert res.provider.split("::")[-2:-1] == ["kubernetes"], (
                f"stack {stack}: {res.type} {res.name} uses provider {res.provider!r}"
            )


def test_secrets_never_in_clear(rendered):
    prod = rendered["prod"]
    (provider,) = [r for r in prod.resources if r.type == "pulumi:providers:kubernetes"]
    # The CI-deployed stack keeps no cluster credential in its provider inputs (the state).
    assert provider.inputs == {"context": "tfd-prod"}
    admin = prod.one("Secret")["stringData"]
    assert admin["admin-password"] == SECRET_TEXT, "Grafana password written in clear"
    # A stack that does hold its kubeconfig gets it as a secret.
    held = render_stack("prod", {"tf-distributed:kubeconfig": {"secure": "kubeconfig"}})
    (provider,) = [r for r in held.resources if r.type == "pulumi:providers:kubernetes"]
    assert provider.inputs["kubeconfig"] == SECRET_TEXT
    text = repr([r.inputs for r in prod.resources]) + repr(prod.outputs)
    assert "Placeholder" not in text, "stack prod: a secure: ciphertext leaked into the render"
    dev_provider = [r for r in rendered["dev"].resources if r.type.startswith("pulumi:providers:k")]
    assert dev_provider[0].inputs == {"context": "minikube"}


def test_monitoring_outputs_exported_only_with_monitoring(rendered):
    prod = rendered["prod"].outputs
    assert prod["grafanaPortForward"] == (
        "kubectl -n monitoring port-forward svc/tfd-monitoring-grafana 3000:80"
    )
    assert prod["prometheusPortForward"] == (
        "kubectl -n monitoring port-forward svc/tfd-monitoring-prometheus 9090:9090"
    )
    assert prod["grafanaService"] == "monitoring/tfd-monitoring-grafana"
    assert prod["prometheusService"] == "monitoring/tfd-monitoring-prometheus"
    assert prod["grafanaAdminSecret"] == "monitoring/tfd-grafana-admin"
    assert prod["monitoringNamespace"] == "monitoring"
    monitoring_keys = set(MONITORING_OUTPUTS)
    assert monitoring_keys <= set(prod), f"stack prod: missing {monitoring_keys - set(prod)}"
    dev = rendered["dev"].outputs
    assert not monitoring_keys & set(dev), f"stack dev (monitoring off): {set(dev)}"


def test_stack_outputs(rendered):
    out = rendered["dev"].outputs
    assert out["namespace"] == "tfd-dev" and out["statefulset"] == "tfd-worker"
    assert out["workerAddresses"] == [
        f"tfd-worker-{i}.tfd-workers.tfd-dev.svc.cluster.local:2222" for i in range(2)
    ]
    assert out["logsCommand"].startswith("kubectl --context minikube -n tfd-dev logs -f -l ")
    assert (
        rendered["prod"]
        .outputs["logsCommand"]
        .startswith("kubectl --context tfd-prod -n tfd-prod logs -f -l ")
    ), rendered["prod"].outputs["logsCommand"]
    # A kubeconfig-only stack targets its own cluster, not the shell's current context.
    held = render_stack(
        "prod",
        {"tf-distributed:kubeconfig": {"secure": "kubeconfig"}, "tf-distributed:kubeContext": ""},
    )
    assert held.outputs["logsCommand"].startswith(
        "kubectl --kubeconfig <(pulumi config get kubeconfig) -n tfd-prod logs -f -l "
    ), held.outputs["logsCommand"]
    assert "@sha256:" in rendered["prod"].outputs["image"], "cloud workers must run a digest"
    prod_image = _container(rendered, "prod")["image"]
    assert prod_image == rendered["prod"].outputs["image"]


@pytest.mark.parametrize(
    ("stack", "target"),
    [
        # dev: the HPA owns the count; prod: no HPA, so the count is part of the target.
        ("dev", "run=1 epochs=3 steps-per-epoch=0"),
        ("prod", "run=1 epochs=20 steps-per-epoch=0 replicas=4"),
    ],
)
def test_the_worker_count_is_set_at_creation_and_by_the_size_patch(rendered, stack, target):
    (sts,) = [r for r in rendered[stack].resources if r.type == "kubernetes:apps/v1:StatefulSet"]
    assert sts.ignore_changes == ("spec.replicas",), f"stack {stack}: StatefulSet ignore_changes"
    (patch,) = [
        r for r in rendered[stack].resources if r.type == "kubernetes:apps/v1:StatefulSetPatch"
    ]
    meta = patch.inputs["metadata"]
    assert meta["name"] == sts.inputs["metadata"]["name"], f"stack {stack}: patch target"
    assert meta["annotations"][contract.RUN_TARGET_ANNOTATION] == target, f"stack {stack}: {meta}"
    assert meta["annotations"][workers.PATCH_FORCE_ANNOTATION] == "true"
    assert patch.inputs["spec"] == {"replicas": sts.inputs["spec"]["replicas"]}
    # Never diffed after its create (a new target is a new patch): its recorded live state can be
    # a copy from before the apply (infra/workers.py).
    assert patch.ignore_changes == ("spec.replicas", "metadata.annotations"), (
        f"stack {stack}: patch ignore_changes"
    )
    assert patch.name.startswith("workers-size-"), patch.name


DOCKER_HOST = "tcp://192.168.49.2:2376"
"""What `minikube docker-env` gives: a minikube stack that builds its image needs it."""


def _dev(**overrides: object) -> object:
    flat = {f"tf-distributed:{k}": v for k, v in {"dockerHost": DOCKER_HOST, **overrides}.items()}
    return parse_config(*stack_config("dev", flat), {})


def _patch_name(**overrides: object) -> str:
    return workers.size_patch_name("workers", workers.run_target(_dev(**overrides)))


def test_a_new_target_is_a_new_size_patch_and_the_same_target_is_not() -> None:
    same = _patch_name()
    assert _patch_name(imageTag="0.9.9") == same, "image: a rollout"
    for key, value in (("epochs", 9), ("stepsPerEpoch", 7), ("runId", "r2")):
        other = _patch_name(**{key: value})
        assert other != same, f"{key}={value}: the finished run's workers would stay at zero"


@pytest.mark.parametrize(("stack", "retain"), [("dev", False), ("prod", True)])
def test_checkpoint_claim_retention_follows_config(rendered, stack, retain):
    (claim,) = [r for r in rendered[stack].resources if r.kind == "PersistentVolumeClaim"]
    assert claim.retain_on_delete is retain, f"stack {stack}: claim retain_on_delete"
    # A claim imported after a Retain destroy carries its bound volume: never a replacement.
    assert set(claim.ignore_changes) == {"spec.volumeName", "spec.volumeMode"}, claim.ignore_changes
    # Deleting the namespace deletes every claim in it: a kept claim needs a kept namespace.
    ns_name = claim.metadata["namespace"]
    (ns,) = [r for r in rendered[stack].resources if r.kind == "Namespace" and r.name == "training"]
    assert ns.metadata["name"] == ns_name, f"stack {stack}: claim outside the training namespace"
    assert ns.retain_on_delete is retain, f"stack {stack}: Namespace {ns_name} retain_on_delete"
    others = [r.name for r in rendered[stack].resources if r.retain_on_delete]
    assert sorted(others) == (["training", "workers-checkpoints"] if retain else []), others


def test_object_store_checkpoints_retain_nothing():
    result = render_stack("prod", {P + "checkpointUri": "gs://bucket/ckpt"})
    assert result.by_kind("PersistentVolumeClaim") == [], "a checkpointUri stack has no claim"
    kept = [r.name for r in result.resources if r.retain_on_delete]
    assert kept == [], f"Pulumi.prod.yaml + checkpointUri: retained {kept}"


def _urn_key(urn: str) -> tuple[str, str]:
    """(type, name) of a URN ``urn:pulumi:<stack>::<project>::<parent$...$type>::<name>``."""
    _, _, types, name = urn.split("::", 3)
    return types.split("$")[-1], name


@pytest.mark.parametrize("stack", STACKS)
def test_objects_in_the_training_namespace_wait_for_it(rendered, stack):
    # Pulumi creates a child concurrently with what its component "depends on" unless the child
    # itself lists the dependency; without it the first `pulumi up` races the Namespace.
    resources = rendered[stack].resources
    deps = {(r.type, r.name): {_urn_key(u) for u in r.dependencies} for r in resources}

    def waits_for(key: tuple[str, str], target: tuple[str, str]) -> bool:
        seen, todo = set(), [key]
        while todo:
            for dep in deps.get(todo.pop(), ()):
                if dep == target:
                    return True
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return False

    (ns,) = [r for r in resources if r.kind == "Namespace" and r.metadata["name"] != "monitoring"]
    ns_name = ns.metadata["name"]
    in_ns = [r for r in resources if r.metadata.get("namespace") == ns_name]
    assert len(in_ns) >= 5, f"stack {stack}: objects in {ns_name}: {[r.name for r in in_ns]}"
    for res in in_ns:
        assert waits_for((res.type, res.name), (ns.type, ns.name)), (
            f"stack {stack}: {res.kind} {res.metadata.get('name')} does not wait for "
            f"Namespace {ns_name}; dependencies {res.dependencies}"
        )


@pytest.mark.parametrize(
    ("overrides", "shm"),
    [
        ({}, None),  # CPU: the runtime's /dev/shm
        ({P + "gpusPerWorker": 1}, "1Gi"),
        ({P + "gpusPerWorker": 4, P + "memoryLimit": "8Gi"}, "4Gi"),
    ],
)
def test_dev_shm_is_sized_per_gpu(overrides, shm):
    pod = render_stack("dev", overrides).one("StatefulSet")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    got = volumes["dshm"]["emptyDir"] if "dshm" in volumes else None
    assert got == (None if shm is None else {"medium": "Memory", "sizeLimit": shm}), (
        f"dev + {overrides}: StatefulSet /dev/shm {got}"
    )
