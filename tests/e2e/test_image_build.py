"""``pulumi up`` builds the trainer image (and the user's code image FROM it), on the real engine,
through a test-only stand-in of pulumi-docker's resource plugin (``tools/docker_provider.py``:
``docker build``/``docker push`` by the Docker CLI; docs/e2e.md says what it proves and what it
does not). A dev stack builds into the daemon and never pushes; a cloud stack pushes to a private
registry over TLS with a password (``tools/registry.py``) and pins the workers to the digest the
registry holds. Runs after ``test_image.py``, whose build leaves the layers cached.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.harness import KUBECONFIG, ROOT, TOOLS, Kube, Project
from tests.e2e.user_image import USER_CODE, write_user_records
from tools import docker_provider
from tools.registry import USER, Registry

REPOSITORY = "tf-distributed-trainer"
STATEFULSET = "tfd-worker"
IMAGE_TYPE = "docker:index/image:Image"
CODE_COPY = TOOLS / "e2e-user-code"
"""The user's directory, copied (under the ignored ``.tools/``) so the test can change a file."""


def docker(*args: str) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"docker {' '.join(args)}: {done.stderr[-2000:]}"
    return done.stdout.strip()


@pytest.fixture(scope="module", autouse=True)
def stand_in_plugin() -> Iterator[None]:
    """The stand-in registered as the ``docker`` plugin of the e2e Pulumi home."""
    if not os.environ.get("DOCKER_HOST"):
        pytest.fail("no Docker daemon: run `make e2e` (it starts one and sets DOCKER_HOST)")
    docker_provider.install(TOOLS / "bin" / "pulumi", TOOLS / "pulumi-home")
    # The harness runs the program in the repository and the CLI (so the plugin) elsewhere.
    os.environ[docker_provider.PROGRAM_DIR_ENV] = str(ROOT)
    yield
    os.environ.pop(docker_provider.PROGRAM_DIR_ENV, None)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    server = Registry(tmp_path_factory.mktemp("registry"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def building_stack(project: Project, namespace: str, tag: str) -> Project:
    project.set("kubeconfig", KUBECONFIG.read_text(), secret=True)
    project.set_many(
        {
            "namespace": namespace,
            "checkpointRetention": "Delete",
            "imageReference": "",
            "imageTag": tag,
            "autoscalingEnabled": "false",
        }
    )
    return project


def test_a_dev_stack_builds_both_images_into_the_daemon_and_a_code_change_rolls_the_workers(
    new_project: Callable[..., Project], kube: Kube
) -> None:
    namespace, tag = "tfd-build-dev", "e2e-build"
    write_user_records()
    shutil.rmtree(CODE_COPY, ignore_errors=True)
    shutil.copytree(USER_CODE, CODE_COPY)
    project = building_stack(new_project("builddev", stack_file="e2e"), namespace, tag)
    project.set("codeDirectory", str(CODE_COPY.relative_to(ROOT)))

    first = project.up()
    built = [s for s in first.steps if s.type == IMAGE_TYPE and s.op == "create"]
    assert len(built) == 2, [(s.type, s.op) for s in first.steps]
    live = kube.get("statefulset.apps", STATEFULSET, namespace)
    template = live["spec"]["template"]
    container = template["spec"]["containers"][0]
    code_tag = f"{REPOSITORY}:{tag}-code"
    assert container["image"] == code_tag, container
    assert container["imagePullPolicy"] == "Never", container
    code_id = docker("image", "inspect", "-f", "{{.Id}}", code_tag)
    assert template["metadata"]["annotations"]["tf-distributed.io/image-id"] == code_id
    # The code image is FROM the trainer image the same up built.
    trainer_id = docker("image", "inspect", "-f", "{{.Id}}", f"{REPOSITORY}:{tag}")
    history = docker("image", "history", "-q", "--no-trunc", code_tag).split()
    assert trainer_id in history, f"{code_tag} is not built on {trainer_id}: {history}"
    print(f"[image build] dev up: {first.seconds:.0f} s, code image {code_id}")

    project.preview(expect_no_changes=True)
    (CODE_COPY / "my_model.py").write_text(
        (CODE_COPY / "my_model.py").read_text() + "\n# a change of the user's code\n"
    )
    change = project.preview()
    updates = {(s.type, s.urn.rsplit("::", 1)[-1]) for s in change.steps if s.op == "update"}
    # The code image is rebuilt and the workers roll; the trainer image's context is unchanged.
    assert (IMAGE_TYPE, "trainer-code") in updates, updates
    assert (IMAGE_TYPE, "trainer") not in updates, updates
    assert any(t == "kubernetes:apps/v1:StatefulSet" for t, _ in updates), updates

    project.up()
    rolled = kube.get("statefulset.apps", STATEFULSET, namespace)["spec"]["template"]
    new_id = docker("image", "inspect", "-f", "{{.Id}}", code_tag)
    assert new_id != code_id
    assert rolled["metadata"]["annotations"]["tf-distributed.io/image-id"] == new_id
    project.destroy()


def test_a_cloud_stack_pushes_with_its_secret_password_and_pins_the_workers_to_the_digest(
    new_project: Callable[..., Project],
    kube: Kube,
    registry: Registry,
) -> None:
    namespace, tag = "tfd-build-cloud", "e2e-push"
    project = building_stack(new_project("buildcloud", stack_file="e2e"), namespace, tag)
    project.set_many(
        {
            "clusterKind": "cloud",
            "imageRegistry": f"{registry.server}/tfd",
            "imageRegistryUsername": USER,
        }
    )
    project.set("imageRegistryPassword", registry.password, secret=True)

    run = project.up()
    digest = registry.manifest_digest(f"tfd/{REPOSITORY}", tag)
    assert digest and digest.startswith("sha256:"), f"the registry has no {REPOSITORY}:{tag}"
    container = kube.get("statefulset.apps", STATEFULSET, namespace)["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["image"] == f"{registry.server}/tfd/{REPOSITORY}@{digest}", container
    assert container["imagePullPolicy"] == "Always", container
    print(f"[image build] cloud up (build + push): {run.seconds:.0f} s, pushed {digest}")

    held = project.export_text() + project.stack_file_text() + str(project.outputs())
    assert registry.password not in held, "the registry password is in the state in plaintext"
    assert registry.password not in run.stdout + run.stderr
    project.preview(expect_no_changes=True)
    project.destroy()
