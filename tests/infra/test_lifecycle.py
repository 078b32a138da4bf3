"""The training run's lifecycle as the stacks declare it: run identity, completion, rollouts,
autoscaling and timeouts (``docs/infra.md``, "Lifecycle"), from the real program under mocks."""

from __future__ import annotations

import pytest

from infra.config import PROJECT, ConfigError, parse_config
from infra.pod import REVISION_LABEL, checkpoint_dir
from tools.render import Rendered, render_stack, stack_config
from trainer import contract
from trainer.contract import RUN_ID_ANNOTATION

P = "tf-distributed:"
STS_TYPE = "kubernetes:apps/v1:StatefulSet"


def _sts(result: Rendered):
    (sts,) = [r for r in result.resources if r.type == STS_TYPE]
    return sts


def _container(result: Rendered) -> dict:
    (container,) = result.one("StatefulSet")["spec"]["template"]["spec"]["containers"]
    return container


def _env(result: Rendered) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in _container(result)["env"]}


def _flag(result: Rendered, flag: str) -> str:
    args = _container(result)["args"]
    return args[args.index(flag) + 1]


@pytest.mark.parametrize(
    ("stack", "overrides", "run_id", "checkpoint_dir"),
    [
        ("dev", {}, "1", "/checkpoints/tf-distributed/dev/1"),
        ("dev", {P + "runId": "lr-2"}, "lr-2", "/checkpoints/tf-distributed/dev/lr-2"),
        # The app is not part of the path: the stack already names one app.
        ("prod", {P + "appName": "mnist"}, "1", "/checkpoints/tf-distributed/prod/1"),
        ("prod", {P + "checkpointUri": "gs://bk/ckpt/"}, "1", "gs://bk/ckpt/tf-distributed/prod/1"),
        ("prod", {P + "checkpointUri": "gs://b/c", P + "runId": "b"}, "b", "gs://b/c/tf-distributed/prod/b"),
    ],
)  # fmt: skip
def test_each_run_has_its_own_checkpoint_directory(stack, overrides, run_id, checkpoint_dir):
    result = render_stack(stack, overrides)
    where = f"Pulumi.{stack}.yaml + {overrides}: StatefulSet {_sts(result).metadata['name']}"
    env = _env(result)
    assert env[contract.ENV_CHECKPOINT_DIR] == checkpoint_dir, where
    assert env[contract.ENV_RUN_ID] == run_id, where
    assert _sts(result).metadata["annotations"][RUN_ID_ANNOTATION] == run_id, where


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_pods_know_their_project_stack_app_and_image(rendered, stack):
    """The run manifest's identity fields (trainer/manifest.py) come from the pod environment,
    and the checkpoint directory is built from the same project and stack."""
    result = rendered[stack]
    env = _env(result)
    where = f"stack {stack}: StatefulSet {_sts(result).metadata['name']} env"
    assert env[contract.ENV_PROJECT] == PROJECT, where
    assert env[contract.ENV_STACK] == stack, where
    assert env[contract.ENV_APP] == _sts(result).metadata["name"].removesuffix("-worker"), where
    assert env[contract.ENV_IMAGE] == _container(result)["image"], where
    project, stack_name, run_id = env[contract.ENV_CHECKPOINT_DIR].split("/")[-3:]
    assert (project, stack_name, run_id) == (PROJECT, stack, env[contract.ENV_RUN_ID]), where


@pytest.mark.parametrize("uri", ["", "gs://shared-bucket/runs"])
def test_two_stacks_never_share_a_checkpoint_directory(uri):
    """Same settings, same runId, same bucket or claim path: the stack (or project) tells the
    directories apart, so one stack's run can never resume or overwrite another's."""
    values, secret_keys = stack_config("prod", {P + "checkpointUri": uri})
    dirs = {
        (project, stack): checkpoint_dir(
            parse_config(values, secret_keys, {}, project=project, stack=stack)
        )
        for project in ("tf-distributed", "tf-distributed-fork")
        for stack in ("prod", "prod-eu", "team-a.prod")
    }
    assert len(set(dirs.values())) == len(dirs), dirs
    for (project, stack), path in dirs.items():
        assert path.endswith(f"/{project}/{stack}/1"), (project, stack, path)


@pytest.mark.parametrize("name", ["", ".", "a/b", "-dev", "x" * 64])
@pytest.mark.parametrize("what", ["project", "stack"])
def test_project_and_stack_names_must_be_path_segments(what, name):
    values, secret_keys = stack_config("dev", {})
    with pytest.raises(ConfigError) as caught:
        parse_config(values, secret_keys, {}, environ={"DOCKER_HOST": "x"}, **{what: name})
    lines = [p for p in caught.value.problems if p.startswith(f"pulumi {what} name:")]
    assert lines and lines[0].endswith(f"; got {name!r}"), caught.value.problems


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_a_new_run_replaces_the_statefulset_deleting_first(rendered, stack):
    sts = _sts(rendered[stack])
    where = f"stack {stack}: StatefulSet {sts.metadata['name']}"
    assert sts.replace_on_changes == (f'metadata.annotations["{RUN_ID_ANNOTATION}"]',), where
    # The old pods hold the names and GPUs the new ones need: create-before-delete would wait.
    assert sts.delete_before_replace is True, where


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_rollouts_are_left_to_the_trainer(rendered, stack):
    spec = rendered[stack].one("StatefulSet")["spec"]
    where = f"stack {stack}: StatefulSet tfd-worker"
    assert spec["updateStrategy"] == {"type": "OnDelete"}, where
    assert spec["podManagementPolicy"] == "Parallel", where
    assert _env(rendered[stack])[contract.ENV_POD_REVISION] == {
        "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.labels['{REVISION_LABEL}']"}
    }, where


@pytest.mark.parametrize(
    ("stack", "overrides", "on_done"),
    [
        ("dev", {}, "scale-to-zero"),
        ("prod", {}, "scale-to-zero"),
        ("dev", {P + "onDone": "idle"}, "idle"),
    ],
)
def test_what_the_workers_do_when_done(stack, overrides, on_done):
    result = render_stack(stack, overrides)
    assert _flag(result, "--on-done") == on_done, f"Pulumi.{stack}.yaml + {overrides}"


@pytest.mark.parametrize(
    ("overrides", "target"),
    [
        # dev: 500m request, 1 CPU limit: 90 % of the limit is 180 % of the request.
        ({}, 180),
        ({P + "autoscalingCpuLimitUtilization": 50}, 100),
        ({P + "cpuRequest": "1", P + "cpuLimit": "1"}, 90),
        ({P + "cpuRequest": "300m", P + "autoscalingCpuLimitUtilization": 80}, 267),
    ],
)
def test_hpa_target_is_a_share_of_the_cpu_limit(overrides, target):
    hpa = render_stack("dev", overrides).one("HorizontalPodAutoscaler")
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"] == {
        "name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": target},
    }, f"Pulumi.dev.yaml + {overrides}: HorizontalPodAutoscaler {hpa['metadata']['name']}"


@pytest.mark.parametrize("window", [60, 300, 1800])
def test_hpa_scales_up_slowly_and_never_down(window):
    hpa = render_stack("dev", {P + "autoscalingScaleUpWindowSeconds": window}).one(
        "HorizontalPodAutoscaler"
    )
    assert hpa["spec"]["behavior"] == {
        "scaleDown": {"selectPolicy": "Disabled"},
        "scaleUp": {
            "stabilizationWindowSeconds": window,
            "selectPolicy": "Min",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": window}],
        },
    }, f"HorizontalPodAutoscaler {hpa['metadata']['name']}: behavior"


@pytest.mark.parametrize(
    ("stack", "timeouts"), [("dev", {}), ("prod", {"create": "30m", "update": "30m"})]
)
def test_cloud_statefulset_awaits_allow_gpu_scale_up(rendered, stack, timeouts):
    sts = _sts(rendered[stack])
    assert sts.custom_timeouts == timeouts, f"stack {stack}: StatefulSet custom timeouts"


@pytest.mark.parametrize(
    ("overrides", "environ", "refused"),
    [
        ({}, {}, True),
        ({}, {"DOCKER_HOST": "tcp://192.168.49.2:2376"}, False),
        ({P + "dockerHost": "tcp://192.168.49.2:2376"}, {}, False),
        ({P + "imageReference": "tf-distributed-trainer:0.1.0"}, {}, False),
    ],
)
def test_minikube_build_needs_a_docker_host(overrides, environ, refused):
    values, secret_keys = stack_config("dev", overrides)
    if not refused:
        parse_config(values, secret_keys, {}, environ=environ)
        return
    with pytest.raises(ConfigError) as caught:
        parse_config(values, secret_keys, {}, environ=environ)
    (line,) = [p for p in caught.value.problems if p.startswith(P + "dockerHost:")]
    assert "minikube docker-env" in line and line.endswith("; got ''"), line
