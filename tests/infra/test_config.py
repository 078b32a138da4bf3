"""Stack configuration: declarations in Pulumi.yaml, the typed parse, and every refusal."""

from __future__ import annotations

import re
from decimal import Decimal

import pulumi
import pytest
import yaml

from infra.config import (
    KEYS,
    PROJECT,
    PROJECT_FILE,
    SYSTEM_NAMESPACES,
    ConfigError,
    parse_config,
    parse_quantity,
    project_declarations,
    scale_quantity,
    to_config_text,
)
from tools.render import STACKS, USER_SECRETS, Recorder, render_stack, stack_config

P = f"{PROJECT}:"
SECRET = {"secure": "AAABAPlaceholder=="}

# (stack, overrides, key named in the message, rule fragment, value fragment)
INVALID = [
    # Other trainer flags: the trainer's own parser judges them; a flag with its own key is not
    # one of them.
    (
        "dev",
        {P + "trainerFlags": ["epochs=5"]},
        "trainerFlags",
        "--epochs is set by the key epochs",
        "'epochs=5'",
    ),
    (
        "dev",
        {P + "trainerFlags": ["allow-cpu-fallback"]},
        "trainerFlags",
        "--allow-cpu-fallback is set by the key allowCpuFallback",
        "'allow-cpu-fallback'",
    ),
    (
        "dev",
        {P + "trainerFlags": ["learning-rate=-1"]},
        "trainerFlags",
        "--learning-rate: must be a number in (0, 10]",
        "learning-rate=-1",
    ),
    (
        "dev",
        {P + "trainerFlags": ["--lr=0.1"]},
        "trainerFlags",
        "(--lr: unknown flag)",
        "--lr=0.1",
    ),
    (
        "dev",
        {P + "trainerFlags": "learning-rate=0.1"},
        "trainerFlags",
        "must be an array of strings",
        "learning-rate=0.1",
    ),
    ("dev", {P + "replicas": 0}, "replicas", "integer in [1, 1000]", "'0'"),
    ("prod", {P + "replicas": "two"}, "replicas", "integer in [1, 1000]", "'two'"),
    ("prod", {P + "gpusPerWorker": -1}, "gpusPerWorker", "integer in [0, 16]", "'-1'"),
    ("dev", {P + "clusterKind": "kind"}, "clusterKind", "one of minikube, cloud", "'kind'"),
    (
        "prod",
        {P + "kubeconfig": None, P + "kubeContext": None},
        "kubeContext",
        "needs a kube context and/or a secret kubeconfig",
        "''",
    ),
    ("dev", {P + "kubeconfig": "apiVersion: v1"}, "kubeconfig", "--secret", "plaintext"),
    ("dev", {P + "cpuRequest": "1 core"}, "cpuRequest", "quantity of CPU", "'1 core'"),
    ("dev", {P + "memoryLimit": "512Mi"}, "memoryLimit", ">= memoryRequest (1Gi)", "'512Mi'"),
    ("dev", {P + "checkpointSize": "10GB"}, "checkpointSize", "quantity of storage", "'10GB'"),
    ("dev", {P + "checkpointSize": "1.5"}, "checkpointSize", "whole number of bytes", "'1.5'"),
    ("dev", {P + "replica": 3}, "replica", "did you mean tf-distributed:replicas?", "3"),
    ("dev", {P + "zzz": 3}, "zzz", "unknown key (not declared in Pulumi.yaml); got", "3"),
    (
        "dev",
        {P + "autoscalingMinReplicas": 4, P + "autoscalingMaxReplicas": 3},
        "autoscalingMinReplicas",
        "<= autoscalingMaxReplicas (3)",
        "4",
    ),
    ("dev", {P + "replicas": 5}, "replicas", "within [autoscalingMinReplicas", "5"),
    ("dev", {P + "precision": "fp8"}, "precision", "one of auto, fp32, bf16, fp16", "'fp8'"),
    ("dev", {P + "precision": "fp16"}, "precision", "needs gpusPerWorker >= 1", "'fp16'"),
    (
        "dev",
        {P + "autoscalingCpuLimitUtilization": 101},
        "autoscalingCpuLimitUtilization",
        "integer in [1, 100]",
        "'101'",
    ),
    (
        "dev",
        {P + "autoscalingCpuUtilization": 80},
        "autoscalingCpuUtilization",
        "replaced by autoscalingCpuLimitUtilization",
        "'80'",
    ),
    (
        "dev",
        {P + "autoscalingScaleUpWindowSeconds": 30},
        "autoscalingScaleUpWindowSeconds",
        "integer in [60, 1800]",
        "'30'",
    ),
    ("dev", {P + "apiServerCidrs": []}, "apiServerCidrs", "API server's endpoint CIDRs", "[]"),
    ("prod", {P + "apiServerCidrs": []}, "apiServerCidrs", "API server's endpoint CIDRs", "[]"),
    # The shared rules (trainer/contract/rules.py) at their bounds.
    ("dev", {P + "runId": "-bad"}, "runId", "1-63 letters, digits", "'-bad'"),
    ("dev", {P + "runId": "run/2"}, "runId", "1-63 letters, digits", "'run/2'"),
    ("dev", {P + "runId": "r" * 64}, "runId", "1-63 letters, digits", "'" + "r" * 64 + "'"),
    ("prod", {P + "replicas": 1001}, "replicas", "integer in [1, 1000]", "'1001'"),
    ("dev", {P + "autoscalingMaxReplicas": 1001}, "autoscalingMaxReplicas", "[1, 1000]", "1001"),
    ("dev", {P + "autoscalingMinReplicas": 0}, "autoscalingMinReplicas", "[1, 1000]", "'0'"),
    (
        "dev",
        {P + "heartbeatTimeoutSeconds": 0},
        "heartbeatTimeoutSeconds",
        "must be a whole number of seconds in (0, 86400)",
        "'0'",
    ),
    (
        "dev",
        {P + "heartbeatTimeoutSeconds": "2.5"},
        "heartbeatTimeoutSeconds",
        "must be a whole number of seconds in (0, 86400)",
        "'2.5'",
    ),
    (
        "dev",
        {P + "collectiveTimeoutSeconds": 86_400},
        "collectiveTimeoutSeconds",
        "must be a whole number of seconds in [0, 86400), 0 = off",
        "'86400'",
    ),
    ("dev", {P + "epochs": 100_001}, "epochs", "integer in [1, 100000]", "'100001'"),
    ("dev", {P + "batchSize": 0}, "batchSize", "integer in [1, 1000000]", "'0'"),
    ("dev", {P + "onDone": "exit"}, "onDone", "scale-to-zero, idle", "'exit'"),
    ("dev", {P + "apiServerCidrs": ["10.0.0.1/33"]}, "apiServerCidrs", "CIDR", "'10.0.0.1/33'"),
    ("dev", {P + "imageTag": "latest"}, "imageTag", "not 'latest'", "'latest'"),
    ("prod", {P + "imageRegistry": ""}, "imageRegistry", "required when clusterKind", "''"),
    ("dev", {P + "namespace": "TF_Train"}, "namespace", "lowercase DNS label", "'TF_Train'"),
    ("dev", {P + "namespace": "kube-system"}, "namespace", "system namespace", "'kube-system'"),
    (
        "prod",
        {P + "namespace": "default", P + "namespaceMode": "existing"},
        "namespace",
        "must not be a Kubernetes system namespace (default, kube-node-lease",
        "'default'",
    ),
    ("dev", {P + "namespaceMode": "adopt"}, "namespaceMode", "one of create, existing", "'adopt'"),
    (
        "prod",
        {P + "monitoringNamespace": "kube-system"},
        "monitoringNamespace",
        "must not be a Kubernetes system namespace",
        "'kube-system'",
    ),
    (
        "prod",
        {P + "monitoringNamespace": "kube-public", P + "monitoringInstall": False},
        "monitoringNamespace",
        "system namespace",
        "'kube-public'",
    ),
    (
        "prod",
        {P + "monitoringNamespaceMode": "shared"},
        "monitoringNamespaceMode",
        "one of create, existing",
        "'shared'",
    ),
    ("dev", {P + "collective": "nccl"}, "collective", "needs gpusPerWorker >= 1", "'nccl'"),
    ("dev", {P + "collective": "mpi"}, "collective", "one of auto, ring, nccl", "'mpi'"),
    ("dev", {P + "metricsPort": 2222}, "metricsPort", "must differ from grpcPort", "2222"),
    ("dev", {P + "grpcPort": 80}, "grpcPort", "integer in [1024, 65535]", "'80'"),
    (
        "prod",
        {P + "gpuTolerations": ["nvidia.com/gpu:Sometimes"]},
        "gpuTolerations",
        "'key[=value]:Effect'",
        "'nvidia.com/gpu:Sometimes'",
    ),
    ("prod", {P + "gpuNodeSelector": ["gpu=a b"]}, "gpuNodeSelector", "'key=value'", "'gpu=a b'"),
    ("prod", {P + "gpuNodeSelector": ["=gpu"]}, "gpuNodeSelector", "or 'key' alone", "'=gpu'"),
    (
        "dev",
        {P + "checkpointUri": "http://bucket/ckpt"},
        "checkpointUri",
        "http:// is not a filesystem the trainer has",
        "'http://bucket/ckpt'",
    ),
    ("dev", {P + "checkpointUri": "bucket/ckpt"}, "checkpointUri", "gs://bucket/path URI", "buc"),
    # s3: refused before anything is deployed, with what to use on AWS instead
    ("prod", {P + "checkpointUri": "s3://b/c"}, "checkpointUri", "EFS", "'s3://b/c'"),
    ("dev", {P + "dataset": "s3://b/train.npz"}, "dataset", "s3:// is not supported", "'s3://"),
    ("dev", {P + "dataset": "mnist"}, "egressHttpsCidrs", "must allow HTTPS egress", "[]"),
    (
        "dev",
        {P + "terminationGracePeriodSeconds": 30, P + "collectiveTimeoutSeconds": 60},
        "terminationGracePeriodSeconds",
        "must exceed collectiveTimeoutSeconds (60)",
        "30",
    ),
    (
        "dev",
        {P + "collectiveTimeoutSeconds": -1},
        "collectiveTimeoutSeconds",
        "must be a whole number of seconds in [0, 86400), 0 = off",
        "-1",
    ),
    ("dev", {P + "checkpointRetention": "Keep"}, "checkpointRetention", "Retain, Delete", "'Keep'"),
    ("dev", {P + "monitoringEnabled": "yes"}, "monitoringEnabled", "boolean", "'yes'"),
    (
        "prod",
        {P + "monitoringNamespace": "tfd-prod"},
        "monitoringNamespace",
        "must differ from namespace (tfd-prod)",
        "'tfd-prod'",
    ),
    ("dev", {P + "epochs": 0}, "epochs", "integer in [1, 100000]", "'0'"),
    (
        "prod",
        {P + "monitoringNamespace": "Monitoring"},
        "monitoringNamespace",
        "lowercase DNS label",
        "'Monitoring'",
    ),
    ("prod", {P + "monitoringNamespace": "m" * 64}, "monitoringNamespace", "at most 63", "'mmm"),
    (
        "prod",
        {P + "monitoringChartVersion": "^81.0.0"},
        "monitoringChartVersion",
        "MAJOR.MINOR.PATCH",
        "'^81.0.0'",
    ),
    ("prod", {P + "imagePlatform": "arm64"}, "imagePlatform", "os/arch", "'arm64'"),
    ("dev", {P + "imageTag": "v1 beta"}, "imageTag", "a Docker tag", "'v1 beta'"),
    ("dev", {P + "imageReference": "Trainer:1"}, "imageReference", "image reference", "Trainer"),
    ("dev", {P + "imageReference": "trainer"}, "imageReference", "a tag or a digest", "'trainer'"),
    ("dev", {P + "imageReference": "trainer:latest"}, "imageReference", "not 'latest'", "latest"),
    (
        "prod",
        {P + "imageReference": "registry.example/tfd/trainer:1.0"},
        "imageReference",
        "pinned by digest",
        "trainer:1.0",
    ),
    (
        "prod",
        {P + "imageReference": "registry.example/tfd/trainer@sha256:abc"},
        "imageReference",
        "image reference",
        "sha256:abc",
    ),
    # codeDirectory: a directory of the user's, relative to the project directory.
    ("dev", {P + "codeDirectory": "/tmp"}, "codeDirectory", "not an absolute path", "'/tmp'"),
    ("dev", {P + "codeDirectory": "no-such-dir"}, "codeDirectory", "existing directory", "'no-"),
    ("dev", {P + "codeDirectory": "README.md"}, "codeDirectory", "not a file", "'README.md'"),
    ("dev", {P + "codeDirectory": "."}, "codeDirectory", "the project directory", "'.'"),
    ("dev", {P + "codeDirectory": ".."}, "codeDirectory", "or hold it", "'..'"),
    ("dev", {P + "codeDirectory": "trainer"}, "codeDirectory", "trainer package", "'trainer'"),
    ("prod", {P + "codeDirectory": "trainer/contract"}, "codeDirectory", "trainer package", "con"),
    (
        "prod",
        {
            P + "codeDirectory": "tests/e2e/user_code",
            P + "imageReference": "registry.example/tfd/trainer@sha256:" + "a" * 64,
        },
        "codeDirectory",
        "must be empty when imageReference is set",
        "'tests/e2e/user_code'",
    ),
    (
        "dev",
        {P + "codeDirectory": "tests/e2e/user_code", P + "imageTag": "v" * 124},
        "imageTag",
        "at most 123 characters with codeDirectory",
        "vvv",
    ),
    (
        "prod",
        {P + "imageRegistryUsername": "ci-bot"},
        "imageRegistryUsername/imageRegistryPassword",
        "set both",
        "password unset",
    ),
    (
        "prod",
        {P + "egressHttpsCidrs": ["10.0.0.1/8"]},
        "egressHttpsCidrs",
        "CIDR such as '0.0.0.0/0'",
        "'10.0.0.1/8'",
    ),
    # a bare address: a NetworkPolicy's ipBlock needs a prefix length
    ("prod", {P + "egressHttpsCidrs": ["10.0.0.1"]}, "egressHttpsCidrs", "CIDR such", "10.0.0.1"),
    ("dev", {P + "apiServerCidrs": ["10.96.0.1"]}, "apiServerCidrs", "CIDR such", "10.96.0.1"),
    # a metadata server without its port, or with one out of range
    (
        "gke",
        {P + "metadataEgress": ["169.254.169.254/32"]},
        "metadataEgress",
        "CIDR:port such",
        "'169.254.169.254/32'",
    ),
    (
        "gke",
        {P + "metadataEgress": ["169.254.169.254/32:0"]},
        "metadataEgress",
        "CIDR:port such",
        "'169.254.169.254/32:0'",
    ),
    (
        "gke",
        {P + "metadataEgress": ["169.254.169.254:80"]},
        "metadataEgress",
        "CIDR:port such",
        "'169.254.169.254:80'",
    ),
    # quantities past what a node or a volume gives
    ("dev", {P + "cpuLimit": "1e23"}, "cpuLimit", "of CPU from 1m to 1024", "1e23"),
    ("dev", {P + "cpuRequest": "1e-9"}, "cpuRequest", "of CPU from 1m to 1024", "1e-9"),
    ("dev", {P + "memoryLimit": "1e400"}, "memoryLimit", "of memory from 1Mi to 64Ti", "1e400"),
    ("dev", {P + "memoryRequest": "1"}, "memoryRequest", "of memory from 1Mi to 64Ti", "'1'"),
    # the memory-backed /dev/shm (1Gi per GPU) counts against the limit
    (
        "dev",
        {P + "gpusPerWorker": 2, P + "memoryLimit": "3Gi", P + "memoryRequest": "1Gi"},
        "memoryLimit",
        "must be at least 4Gi with gpusPerWorker 2: the memory-backed /dev/shm (2Gi",
        "'3Gi'",
    ),
    ("dev", {P + "apiServerPorts": "[443, 0]"}, "apiServerPorts", "integers in [1, 65535]", "443"),
    ("dev", {P + "gpuTolerations": "not json"}, "gpuTolerations", "array of strings", "not json"),
    (
        "prod",
        {P + "dnsEgressCidrs": ["169.254.20.10/8"]},
        "dnsEgressCidrs",
        "CIDR such as '169.254.20.10/32'",
        "'169.254.20.10/8'",
    ),
    (
        "dev",
        {"pulumi:disable-default-providers": ["aws"]},
        "pulumi:disable-default-providers",
        "must list 'kubernetes'",
        "aws",
    ),
]


@pytest.mark.parametrize(
    ("stack", "overrides", "key", "rule", "value"),
    INVALID,
    ids=[f"{s}-{k}-{i}" for i, (s, _, k, _, _) in enumerate(INVALID)],
)
def test_invalid_value_is_refused_before_any_resource(stack, overrides, key, rule, value):
    recorder = Recorder()
    with pytest.raises(ConfigError) as caught:
        render_stack(stack, overrides, recorder=recorder)
    full_key = key if ":" in key else P + key
    lines = [p for p in caught.value.problems if p.startswith(f"{full_key}:")]
    assert lines, f"Pulumi.{stack}.yaml + {overrides}: no problem names {full_key}: {caught.value}"
    assert any(rule in line and value in line.partition("; got ")[2] for line in lines), (
        f"Pulumi.{stack}.yaml + {overrides}: expected rule {rule!r} and value {value!r} in {lines}"
    )
    assert recorder.resources == [], (
        f"Pulumi.{stack}.yaml + {overrides}: registered {[r.name for r in recorder.resources]}"
    )


def test_config_error_is_reported_without_a_traceback():
    # The Pulumi runtime prints a RunError's message alone (no Python traceback).
    assert issubclass(ConfigError, pulumi.RunError)
    assert issubclass(ConfigError, ValueError)


def test_example_stack_files_ship_no_secret_ciphertext():
    # A `secure:` value only its author's secrets provider can decrypt makes every user's first
    # `pulumi preview` fail; the files say which secrets to set instead.
    for stack in (*STACKS, "e2e"):
        doc = yaml.safe_load((PROJECT_FILE.parent / f"Pulumi.{stack}.yaml").read_text())
        secure = [k for k, v in doc["config"].items() if isinstance(v, dict) and "secure" in v]
        assert secure == [], f"Pulumi.{stack}.yaml ships ciphertext for {secure}"
    for stack, keys in USER_SECRETS.items():
        text = (PROJECT_FILE.parent / f"Pulumi.{stack}.yaml").read_text()
        for key in keys:
            assert f"pulumi config set --secret {key}" in text, (
                f"Pulumi.{stack}.yaml does not tell its user to set the secret {key}"
            )


KUBECONFIG_TEXT = "apiVersion: v1\nusers:\n- user:\n    token: eyJhbGciOiJSUzI1NiJ9.hunter2\n"

SECRET_ECHOES = [
    # a misspelled key set with --secret: unknown, and its value a secret all the same
    ({P + "kubeconfg": KUBECONFIG_TEXT}, P + "kubeconfg"),
    # a declared plain key set with --secret and breaking its rule
    ({P + "imageTag": "latest-hunter2!"}, P + "imageTag"),
    # a value set as a secret that another key's rule shows
    (
        {P + "checkpointUri": "gs://hunter2-bucket/ckpt", P + "egressHttpsCidrs": []},
        P + "egressHttpsCidrs",
    ),
]


@pytest.mark.parametrize(("overrides", "key"), SECRET_ECHOES, ids=lambda v: str(v)[:40])
def test_a_value_set_as_a_secret_is_never_shown(overrides, key):
    # The values as the program's own config read and tfd hold them: decrypted, with the keys
    # that were set as secrets named beside them (here the first of the overrides).
    values, secret_keys = stack_config("dev", overrides)
    with pytest.raises(ConfigError) as caught:
        parse_config(values, [*secret_keys, *list(overrides)[:1]], {}, {}, stack="dev")
    text = str(caught.value)
    assert "hunter2" not in text, f"{overrides}: a secret shown in {text}"
    assert any(line.startswith(f"{key}:") for line in caught.value.problems), (
        f"{overrides}: no problem names {key}: {text}"
    )


def test_a_declared_secret_in_plain_text_is_never_shown():
    with pytest.raises(ConfigError) as caught:
        render_stack("dev", {P + "kubeconfig": "token: hunter2"})
    assert "hunter2" not in str(caught.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as caught:
        render_stack("dev", {P + "replicas": 0, P + "imageTag": "latest", P + "epochs": 0})
    keys = {p.split(": ", 1)[0] for p in caught.value.problems}
    assert {P + "replicas", P + "imageTag", P + "epochs"} <= keys, caught.value.problems


@pytest.mark.parametrize("name", SYSTEM_NAMESPACES)
def test_every_system_namespace_is_refused_with_the_other_problems(name):
    with pytest.raises(ConfigError) as caught:
        render_stack(
            "prod",
            {P + "namespace": name, P + "monitoringNamespace": name, P + "replicas": 0},
        )
    rule = "must not be a Kubernetes system namespace"
    for key in ("namespace", "monitoringNamespace"):
        assert any(
            p.startswith(f"{P}{key}: {rule}") and p.endswith(f"; got {name!r}")
            for p in caught.value.problems
        ), f"{key}={name}: {caught.value.problems}"
    assert any(p.startswith(f"{P}replicas:") for p in caught.value.problems), caught.value


def test_a_system_namespace_name_is_free_where_monitoring_is_off():
    # monitoringNamespace names nothing on the cluster while monitoring is off.
    cfg = parse_config(*stack_config("dev", {P + "monitoringNamespace": "kube-system"}), {})
    assert not cfg.monitoring.enabled and cfg.monitoring.namespace == "kube-system"


@pytest.mark.parametrize(
    ("overrides", "owns", "creates_monitoring"),
    [
        ({}, True, True),
        ({P + "namespaceMode": "existing"}, False, True),
        ({P + "monitoringNamespaceMode": "existing"}, True, False),
        ({P + "monitoringInstall": False}, True, False),
    ],
)
def test_namespace_modes(overrides, owns, creates_monitoring):
    cfg = parse_config(*stack_config("prod", overrides), {})
    assert cfg.owns_namespace is owns, f"Pulumi.prod.yaml + {overrides}"
    assert cfg.monitoring.creates_namespace is creates_monitoring, f"Pulumi.prod.yaml + {overrides}"
    # Retain keeps the claim; the namespace only where it is the stack's to delete.
    assert cfg.retains_checkpoint_claim and cfg.retains_namespace is owns


@pytest.mark.parametrize(
    ("text", "factor", "expected"),
    [("16Gi", 4, "64Gi"), ("500m", 3, "1500m"), ("1.5Gi", 3, "4.5Gi"), ("2", 2, "4"), (1, 4, "4")],
)
def test_scale_quantity_is_exact_in_the_same_suffix(text, factor, expected):
    assert scale_quantity(text, factor) == expected
    assert parse_quantity(expected) == parse_quantity(str(text)) * factor


@pytest.mark.parametrize("stack", STACKS)
def test_stack_files_parse(stack):
    values, secret_keys = stack_config(stack)
    cfg = parse_config(values, secret_keys, {})
    assert cfg.namespace == f"tfd-{stack}", f"Pulumi.{stack}.yaml: namespace {cfg.namespace}"


def test_collective_timeout_off_by_default():
    """0 (the default) turns the trainer's per-collective timeout off; a value still works."""
    default = parse_config(*stack_config("dev"), {})
    assert default.training.collective_timeout_seconds == 0
    with_timeout = parse_config(*stack_config("dev", {P + "collectiveTimeoutSeconds": 20}), {})
    assert with_timeout.training.collective_timeout_seconds == 20


@pytest.mark.parametrize(
    ("overrides", "field", "expected"),
    [
        # Run ids the stack refused before the one rule (a DNS label of at most 20): the
        # trainer always accepted them, and they are label values and path segments.
        ({P + "runId": "Run_2"}, "run_id", "Run_2"),
        ({P + "runId": "r" * 63}, "run_id", "r" * 63),
        ({P + "runId": "a.b-c_d"}, "run_id", "a.b-c_d"),
        ({P + "heartbeatTimeoutSeconds": 86_399}, "heartbeat_timeout_seconds", 86_399),
        ({P + "heartbeatTimeoutSeconds": 1}, "heartbeat_timeout_seconds", 1),
        ({P + "epochs": 100_000}, "epochs", 100_000),
        ({P + "stepsPerEpoch": 0}, "steps_per_epoch", 0),
    ],
)
def test_shared_rules_accept_their_bounds(overrides, field, expected):
    cfg = parse_config(*stack_config("dev", overrides), {})
    assert getattr(cfg.training, field) == expected


@pytest.mark.parametrize(("replicas", "hpa"), [(1000, "false"), (1, "false")])
def test_replicas_bounds_are_accepted(replicas, hpa):
    overrides = {P + "replicas": replicas, P + "autoscalingEnabled": hpa}
    assert parse_config(*stack_config("prod", overrides), {}).workers.replicas == replicas


@pytest.mark.parametrize(("value", "present"), [("true", True), ("false", False)])
def test_a_key_that_declares_its_flag_reaches_the_trainer(value, present):
    # allowCpuFallback declares flag="allow_cpu_fallback" and nothing else: the pod's args
    # carry it, and trainerFlags refuses it (above).
    from infra.pod import trainer_args

    cfg = parse_config(*stack_config("prod", {P + "allowCpuFallback": value}), {})
    args = trainer_args(cfg.training)
    assert ("--allow-cpu-fallback" in args) is present, args


@pytest.mark.parametrize(
    ("stack", "overrides", "expected"),
    [
        ("dev", {}, "auto"),
        ("dev", {P + "precision": "bf16"}, "bf16"),
        ("prod", {P + "precision": "fp16"}, "fp16"),
    ],
)
def test_precision_reaches_the_trainer_flags(stack, overrides, expected):
    from infra.pod import trainer_args

    cfg = parse_config(*stack_config(stack, overrides), {})
    args = trainer_args(cfg.training)
    assert cfg.training.precision == expected, f"{stack} {overrides}: {cfg.training.precision}"
    assert args[args.index("--precision") + 1] == expected, f"{stack} {overrides}: {args}"


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], {}),
        (
            ["learning-rate=0.01", "--model=my_model:build", "deterministic"],
            {"--learning-rate": "0.01", "--model": "my_model:build", "--deterministic": None},
        ),
        (["seed=1"], {}),  # the trainer's default: nothing to write
    ],
)
def test_other_trainer_flags_reach_the_container_args(flags, expected):
    from infra.pod import trainer_args

    cfg = parse_config(*stack_config("dev", {P + "trainerFlags": flags}), {})
    args = trainer_args(cfg.training)
    base = trainer_args(parse_config(*stack_config("dev"), {}).training)
    added = [a for a in args if a not in base]
    got = {}
    for flag in (a for a in added if a.startswith("--")):
        following = added[added.index(flag) + 1] if added.index(flag) + 1 < len(added) else None
        got[flag] = None if following is None or following.startswith("--") else following
    assert got == expected, f"trainerFlags {flags}: container args {args}"
    assert args[args.index("--epochs") + 1] == str(cfg.training.epochs), args


def test_stack_settings_per_issue():
    dev = parse_config(*stack_config("dev"), {})
    prod = parse_config(*stack_config("prod"), {})
    assert (dev.cluster.kind, dev.workers.replicas, dev.workers.gpus) == ("minikube", 2, 0)
    assert (dev.autoscaling.enabled, dev.monitoring.enabled) == (True, False)
    assert (dev.autoscaling.min_replicas, dev.autoscaling.max_replicas) == (2, 3)
    assert dev.storage.storage_class == "standard"
    assert prod.cluster.kind == "cloud" and prod.workers.gpus >= 1
    assert prod.workers.gpu_node_selector and prod.workers.gpu_tolerations
    assert (prod.autoscaling.enabled, prod.monitoring.enabled) == (False, True)
    # The CI-deployed stack names a kube context; no cluster credential in its config or state.
    assert (prod.cluster.context, prod.cluster.kubeconfig) == ("tfd-prod", None)
    assert stack_config("prod")[1] == [P + "grafanaAdminPassword"], "Pulumi.prod.yaml secrets"


@pytest.mark.parametrize("key", KEYS.values(), ids=list(KEYS))
def test_every_key_has_a_description_and_a_default_its_own_rule_accepts(key):
    assert key.description and "{" not in key.description, f"{key.name}: description"
    kind = {"string": str, "integer": int, "boolean": bool, "array": list}[key.kind.pulumi_type]
    assert isinstance(key.default, kind), f"{key.name}: default {key.default!r} is no {kind}"
    _, broken = key.kind.read(to_config_text(key.default))
    assert broken == [], f"{key.name}: default {key.default!r} breaks {broken}"


def test_parser_reads_exactly_the_declared_keys():
    values, _ = stack_config("dev")
    declared = set(project_declarations())
    for key in sorted(declared):
        trimmed = {k: v for k, v in values.items() if k != P + key}
        with pytest.raises(ConfigError, match=re.escape(f"{P}{key}: required")):
            parse_config(trimmed)


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", Decimal("0.5")), ("2", Decimal(2)), ("2Gi", Decimal(2 * 1024**3)), ("1e3", 1000)],
)
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1 core", "10GB", "-1", "Gi", "1.2.3"])
def test_parse_quantity_refuses(text):
    with pytest.raises(ValueError, match=f"^{re.escape(text)}$"):
        parse_quantity(text)


def test_default_providers_disabled_for_every_stack():
    project = yaml.safe_load(PROJECT_FILE.read_text())["config"]
    assert project["pulumi:disable-default-providers"] == {"value": ["kubernetes"]}
    for stack in ("dev", "prod"):
        values, _ = stack_config(stack)
        assert values["pulumi:disable-default-providers"] == '["kubernetes"]', stack


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        # No stand-in value is judged by a rule between keys: the key's own problem is the one.
        ({P + "replicas": None}, "replicas"),  # not "must lie within [2, 3]; got 1"
        ({P + "apiServerPorts": "[443, 0]"}, "apiServerPorts"),  # not "must list ... CIDRs"
        ({P + "gpusPerWorker": "x", P + "collective": "nccl"}, "gpusPerWorker"),
        ({P + "egressHttpsCidrs": "x", P + "dataset": "mnist"}, "egressHttpsCidrs"),
        ({P + "cpuRequest": "0", P + "cpuLimit": "100m"}, "cpuRequest"),
    ],
)
def test_a_value_without_a_type_is_one_problem(overrides, key):
    values, secret_keys = stack_config("dev", overrides)
    with pytest.raises(ConfigError) as caught:
        parse_config(values, secret_keys, {})
    assert [p.split(": ", 1)[0] for p in caught.value.problems] == [P + key], caught.value


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("replicas", "(1-1000)"),
        ("collectiveTimeoutSeconds", "(0-86399)"),  # [0, 86400) in whole seconds
        ("heartbeatTimeoutSeconds", "(1-86399)"),  # (0, 86400)
        ("epochs", "(1-100000)"),
        ("monitoringAlertForMinutes", "(minutes, 0-60)"),
    ],
)
def test_descriptions_state_the_rule_of_their_key(key, shown):
    assert shown in KEYS[key].description, KEYS[key].description


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, None),
        ({P + "codeDirectory": "tests/e2e/user_code"}, "tests/e2e/user_code"),
        ({P + "codeDirectory": "tests/e2e/user_code/"}, "tests/e2e/user_code/"),
    ],
)
def test_code_directory_reaches_the_image_config(overrides, expected):
    values, secret_keys = stack_config("dev", overrides)
    cfg = parse_config(values, secret_keys, environ={"DOCKER_HOST": "tcp://m:2376"}, stack="dev")
    assert cfg.image.code_directory == expected, f"dev + {overrides}: image.code_directory"


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({}, "dockerHost"),  # dev builds into minikube's daemon: no DOCKER_HOST here
        ({P + "clusterKind": "cloud", P + "kubeContext": "c"}, "imageRegistry"),
    ],
    ids=["minikube-without-its-daemon", "cloud-without-a-registry"],
)
def test_the_image_rules_apply_only_to_a_caller_that_builds(overrides, key):
    """The program (and tfd submit) builds: the rule holds. A reader of the stack's names
    (tfd status, tfd runs) builds nothing: the same config reads."""
    values, secret_keys = stack_config("dev", overrides)
    with pytest.raises(ConfigError) as info:
        parse_config(values, secret_keys, environ={}, stack="dev")
    assert any(p.startswith(f"tf-distributed:{key}: ") for p in info.value.problems), info.value
    cfg = parse_config(values, secret_keys, environ={}, stack="dev", building=False)
    assert (cfg.namespace, cfg.statefulset_name) == ("tfd-dev", "tfd-worker")
