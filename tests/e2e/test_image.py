"""The trainer image: the real Dockerfile built by a real Docker engine, run, and deployed.

This module builds the image with ``docker build`` from the repository's Dockerfile, runs the
trainer in it, and deploys it with the real engine as a prebuilt image (``imageReference``);
``test_image_build.py`` has ``pulumi up`` build it through a stand-in of the Docker provider.
``make e2e`` starts the Docker daemon (``DOCKER_HOST``) and imports a test-only stand-in for the
``tensorflow/tensorflow`` base image, which cannot be pulled here (``tools/stand-in-base.sh``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from infra import image
from tests.e2e.harness import KUBECONFIG, ROOT, Kube, Project
from tests.e2e.user_image import USER_CLASSES, USER_DATASET, USER_MODEL, build_user_image
from trainer import contract
from trainer.errors import EXIT_CONTRACT

REPOSITORY = "tf-distributed-trainer"
NAMESPACE = "tfd-image"


def docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def built() -> str:
    """``docker build`` of the repository (CPU variant); the image ID."""
    if not os.environ.get("DOCKER_HOST") or docker("info").returncode != 0:
        pytest.fail("no Docker daemon: run `make e2e` (it starts one and sets DOCKER_HOST)")
    # The daemon has no bridge network here: the build reaches PyPI through the host's network.
    result = docker(
        "build", "--network", "host", "-t", f"{REPOSITORY}:e2e", str(ROOT), timeout=1200
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return docker("image", "inspect", "-f", "{{.Id}}", f"{REPOSITORY}:e2e").stdout.strip()


@pytest.fixture(scope="module")
def built_gpu(built: str) -> str:
    """``docker build`` of the GPU image (``TF_EXTRA=and-cuda``, as GPU stacks build it), after
    the CPU one so that its layers are shared; the image ID."""
    extra = f"{image.BUILD_ARG_TF_EXTRA}={image.TF_EXTRA_GPU}"
    result = docker(
        "build", "--network", "host", "--build-arg", extra, "-t", f"{REPOSITORY}:e2e-gpu",
        str(ROOT), timeout=1800,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return docker("image", "inspect", "-f", "{{.Id}}", f"{REPOSITORY}:e2e-gpu").stdout.strip()


CUDA_PROBE = """
import importlib.metadata as m, json
from packaging.requirements import Requirement
import tensorflow as tf
info = tf.sysconfig.get_build_info()
wheels = {}
for text in m.requires("tensorflow") or []:
    req = Requirement(text)
    if req.marker is None or not req.marker.evaluate({"extra": "and-cuda"}):
        continue
    if req.marker.evaluate({"extra": ""}):
        continue  # a requirement of every install, not of the extra
    try:
        version = m.version(req.name)
    except m.PackageNotFoundError:
        version = None
    wheels[req.name] = [version, str(req.specifier),
                        version is not None and req.specifier.contains(version)]
print(json.dumps({"cuda_build": bool(info.get("is_cuda_build")),
                  "cuda": info.get("cuda_version"), "cudnn": info.get("cudnn_version"),
                  "tensorflow": tf.__version__, "wheels": wheels}))
"""


def _size_gb(image_id: str) -> float:
    return int(docker("image", "inspect", "-f", "{{.Size}}", image_id).stdout.strip()) / 1e9


def test_the_gpu_image_holds_tensorflows_cuda_libraries(
    built: str, built_gpu: str, record_property: Callable[[str, object], None]
) -> None:
    run = docker("run", "--rm", "--network", "none", "--entrypoint", "python", built_gpu,
                 "-c", CUDA_PROBE, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["tensorflow"] == image.TF_VERSION and seen["cuda_build"], seen
    names = set(seen["wheels"])
    assert {"nvidia-cudnn-cu12", "nvidia-nccl-cu12", "nvidia-cublas-cu12"} <= names, names
    broken = {n: w for n, w in seen["wheels"].items() if not w[2]}
    assert broken == {}, f"NVIDIA wheels missing or outside TensorFlow's pins: {broken}"
    # In the run's JUnit report (.tools/e2e-report-*.xml), for docs/image.md's figures.
    record_property(
        "gpu_image",
        f"CPU image {_size_gb(built):.2f} GB, GPU image {_size_gb(built_gpu):.2f} GB; "
        f"TensorFlow built for CUDA {seen['cuda']}, cuDNN {seen['cudnn']}; wheels: "
        + ", ".join(f"{n} {w[0]} ({w[1]})" for n, w in sorted(seen["wheels"].items())),
    )


def test_the_gpu_image_on_a_node_without_gpus_stops_or_falls_back(
    built_gpu: str, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    given = f"--env={contract.ENV_GPUS}=1"
    run = docker("run", "--rm", "--network", "none", given,
                 *[f"--env={k}={v}" for k, v in ONE_WORKER.items()],
                 "--tmpfs", "/ckpt:uid=10001", built_gpu, "--on-done", "exit",
                 timeout=300)  # fmt: skip
    last = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else ""
    assert run.returncode == EXIT_CONTRACT, (run.stdout + run.stderr)[-4000:]
    assert last.startswith("trainer: error: TFD_GPUS=1: the pod was given 1 GPU(s) but"), last
    record_property("gpu_less_stop", f"exit {run.returncode}: {last}")
    checkpoints = run_one_worker(
        built_gpu, tmp_path, "--allow-cpu-fallback", "--epochs", "1", "--synthetic-examples",
        "512", "--on-done", "exit", env={contract.ENV_GPUS: "1"},
    )  # fmt: skip
    assert (checkpoints / contract.DONE_MARKER).exists() or list(
        checkpoints.rglob(contract.DONE_MARKER)
    ), "the CPU fallback run did not finish"


def test_image_runs_the_contract_entrypoint_as_the_unprivileged_user(built: str) -> None:
    config = json.loads(docker("image", "inspect", "-f", "{{json .Config}}", built).stdout)
    assert config["User"] == "10001:10001", config["User"]
    assert tuple(config["Entrypoint"]) == contract.ENTRYPOINT, config["Entrypoint"]
    assert set(config["ExposedPorts"]) == {
        f"{contract.DEFAULT_GRPC_PORT}/tcp",
        f"{contract.DEFAULT_METRICS_PORT}/tcp",
    }


ONE_WORKER = {
    contract.ENV_STATEFULSET: "tfd-worker",
    contract.ENV_POD_NAME: "tfd-worker-0",
    contract.ENV_REPLICAS: "1",
    contract.ENV_SERVICE: "tfd-workers",
    contract.ENV_NAMESPACE: "default",
    contract.ENV_WORKER_HOSTS: f"127.0.0.1:{contract.DEFAULT_GRPC_PORT}",
    contract.ENV_CHECKPOINT_DIR: "/ckpt",
}
"""The environment the StatefulSet gives a pod, for one worker in a container."""


def run_one_worker(
    image: str, tmp_path: Path, *flags: str, env: dict[str, str] | None = None
) -> Path:
    """``python -m trainer <flags>`` as one worker in ``image``, read-only, unprivileged and
    without a network, its checkpoints in a directory of ``tmp_path``: that directory (the
    run must succeed). ``env``: added to the pod's environment."""
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    checkpoints.chmod(0o777)  # the image's user (10001) writes here
    env = {**ONE_WORKER, **(env or {})}
    run = docker(
        "run", "--rm", "--network", "none", "--read-only", "--tmpfs", "/tmp",
        "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "-v", f"{checkpoints}:/ckpt",
        *[f"--env={k}={v}" for k, v in env.items()],
        image, *flags,
        timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    return checkpoints


def test_the_image_trains_to_completion_read_only_and_unprivileged(
    built: str, tmp_path: Path
) -> None:
    checkpoints = run_one_worker(
        built, tmp_path, "--epochs", "1", "--synthetic-examples", "1024", "--on-done", "exit"
    )
    written = {p.name for p in checkpoints.rglob("*")}
    assert {contract.DONE_MARKER, "summary.json"} <= written, sorted(written)
    summary = json.loads(next(checkpoints.rglob("summary.json")).read_text())
    assert summary["final_step"] > 0, summary


@pytest.fixture(scope="module")
def user_built(built: str) -> str:
    """The user's directory (``tests/e2e/user_code``) built on the trainer image, as
    ``codeDirectory`` has the stack build it; the image ID."""
    return build_user_image(built)


def test_the_user_image_holds_what_its_dockerignore_lets_in(user_built: str) -> None:
    probe = (
        "import json, os, sys; c = '/opt/tfd/code'; "
        "print(json.dumps({'files': sorted(os.listdir(c)), 'data': sorted(os.listdir(c + '/data')),"
        " 'owner': os.stat(c + '/my_model.py').st_uid, 'writable': os.access(c, os.W_OK),"
        " 'path': sys.path, 'uid': os.getuid()}))"
    )
    run = docker("run", "--rm", "--network", "none", "--entrypoint", "python", user_built,
                 "-c", probe)  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert "my_model.py" in seen["files"] and "data" in seen["files"], seen["files"]
    assert "write_records.py" not in seen["files"], "the user's .dockerignore was not applied"
    assert seen["data"] == ["part-0.tfrecord", "part-1.tfrecord"], seen["data"]
    assert (seen["owner"], seen["writable"], seen["uid"]) == (0, False, 10001), seen
    # The trainer's own path first: nothing of the user's can shadow the trainer.
    assert seen["path"].index("/opt/tfd") < seen["path"].index("/opt/tfd/code"), seen["path"]


def test_the_user_image_trains_the_users_model_on_the_users_records(
    user_built: str, tmp_path: Path
) -> None:
    checkpoints = run_one_worker(
        user_built, tmp_path, "--epochs", "1", "--dataset", USER_DATASET, "--model", USER_MODEL,
        "--on-done", "exit",
    )  # fmt: skip
    summary = json.loads(next(checkpoints.rglob("summary.json")).read_text())
    assert summary["final_step"] > 0 and summary["num_classes"] == USER_CLASSES, summary
    manifest = json.loads(next(checkpoints.rglob("manifest.json")).read_text())
    assert manifest["model"]["builder"] == USER_MODEL, manifest["model"]
    assert manifest["dataset"]["spec"] == USER_DATASET, manifest["dataset"]


def test_the_built_image_is_what_the_engine_deploys(
    built: str, new_project: Callable[..., Project], kube: Kube
) -> None:
    # A tag naming the build: the stack's pod template (image and rollout annotation) must
    # carry exactly the image that was built.
    reference = f"{REPOSITORY}:{built.removeprefix('sha256:')[:12]}"
    assert docker("tag", built, reference).returncode == 0
    stack = new_project("image", stack_file="e2e")
    stack.set("kubeconfig", KUBECONFIG.read_text(), secret=True)
    stack.set("namespace", NAMESPACE)
    stack.set("checkpointRetention", "Delete")
    stack.set("imageReference", reference)
    stack.up()
    live = kube.get("statefulset.apps", "tfd-worker", NAMESPACE)
    template = live["spec"]["template"]
    assert template["spec"]["containers"][0]["image"] == reference
    assert template["metadata"]["annotations"]["tf-distributed.io/image-id"] == reference
    assert docker("image", "inspect", "-f", "{{.Id}}", reference).stdout.strip() == built
    kube.wait_for("2 ready workers", lambda: kube.ready_replicas("tfd-worker", NAMESPACE) == 2)
    stack.destroy()
    kube.wait_for("namespace deleted", lambda: kube.get("namespace", NAMESPACE) is None, 180)
