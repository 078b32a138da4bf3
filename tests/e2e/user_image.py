"""A user's own model on the cluster: the image with ``tests/e2e/user_code`` on top of the
trainer image, built by hand the way ``codeDirectory`` has the stack build it
(``code-image/Dockerfile``, the user's directory as the context).

The e2e cannot run pulumi-docker (its Go module is not served), so a stack deploys this image
by ``imageReference`` with the trainer flags the user would set (:data:`USER_FLAGS`):

    user_image = build_user_image(built)          # the trainer image's ID (test_image.built)
    stack.set("imageReference", tag_of(user_image))
    stack.set("dataset", USER_DATASET)            # the records inside the image
    stack.set("trainerFlags", list(USER_FLAGS))   # ["model=my_model:build"]

A module of helpers (no tests), so any e2e module can import it.
"""

from __future__ import annotations

import subprocess
import sys

from infra import image
from tests.e2e.harness import ROOT

USER_CODE = ROOT / "tests" / "e2e" / "user_code"
"""The user's directory (``codeDirectory: tests/e2e/user_code``)."""
USER_MODEL = "my_model:build"
"""``--model`` of the user's builder, importable from :data:`infra.image.CODE_PATH`."""
USER_FLAGS = (f"model={USER_MODEL}",)
"""The stack's ``trainerFlags`` for the user's model."""
USER_DATASET = f"{image.CODE_PATH}/data"
"""``--dataset``: the user's TFRecords, as ``write_records.py`` wrote them, in the image."""
USER_CLASSES = 4
"""Labels of the user's records (``write_records.CLASSES``): the model's output width."""
REPOSITORY = "tf-distributed-trainer"
CODE_TAG = "e2e-code"


def _docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def tag_of(image_id: str, suffix: str = "") -> str:
    """A tag naming the build ``image_id`` (``<repo>:<12 hex><suffix>``), as the node's
    containerd and ``imageReference`` need a name, not an ID."""
    return f"{REPOSITORY}:{image_id.removeprefix('sha256:')[:12]}{suffix}"


def write_user_records() -> None:
    """The user's TFRecords into ``user_code/data`` (deterministic: the same files each run;
    ``data/`` is not committed). Run as the user would, in its own interpreter."""
    result = subprocess.run(
        [sys.executable, str(USER_CODE / "write_records.py")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


def build_user_image(trainer_image_id: str, *, timeout: float = 600) -> str:
    """``docker build`` of the user's directory on the trainer image ``trainer_image_id``
    (an image ID ``sha256:...`` or a reference); the built image's ID.

    The trainer image is first tagged (:func:`tag_of`): ``FROM`` takes a name, not an ID. The
    build is ``docker build --network host -f code-image/Dockerfile --build-arg
    TRAINER_IMAGE=<tag> --build-arg TRAINER_IMAGE_ID=<id> -t <repo>:e2e-code
    tests/e2e/user_code``, as docs/image.md shows it by hand.
    """
    base = trainer_image_id
    if trainer_image_id.startswith("sha256:"):
        base = tag_of(trainer_image_id)
        tagged = _docker("tag", trainer_image_id, base)
        assert tagged.returncode == 0, tagged.stderr[-2000:]
    base_id = _docker("image", "inspect", "-f", "{{.Id}}", base).stdout.strip()
    assert base_id.startswith("sha256:"), f"no trainer image {base!r} in the daemon"
    write_user_records()
    name = f"{REPOSITORY}:{CODE_TAG}"
    # The daemon has no bridge network here; the build runs nothing, but keep it off the bridge.
    result = _docker(
        "build", "--network", "host", "-f", str(image.CODE_DOCKERFILE),
        "--build-arg", f"{image.BUILD_ARG_TRAINER_IMAGE}={base}",
        "--build-arg", f"{image.BUILD_ARG_TRAINER_IMAGE_ID}={base_id}",
        "-t", name, str(USER_CODE),
        timeout=timeout,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    built = _docker("image", "inspect", "-f", "{{.Id}}", name).stdout.strip()
    assert built.startswith("sha256:") and built != base_id, f"{name}: image ID {built!r}"
    return built
