"""The trainer image component under Pulumi mocks: what the workers run and how the registry
password travels."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.runtime.rpc import is_rpc_secret, unwrap_rpc_secret

from infra import image, image_mock
from infra.config import PROJECT, ConfigError, ImageConfig
from infra.pod import CONTAINER_NAME
from tools import render

PASSWORD = "hunter2-registry-password"
REGISTRY = "registry.example.com:5000/ml"
IMAGE_TYPE = "docker:index/image:Image"
PROVIDER_TYPE = "pulumi:providers:docker"
DIGEST_REF = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


class ImageMocks(pulumi.runtime.Mocks):
    """Records every resource; docker resources get :func:`image_mock.mock_image_outputs`."""

    def __init__(self) -> None:
        self.created: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.created.append(args)
        outputs = (
            image_mock.mock_image_outputs(args.typ, args.inputs)
            if args.typ.startswith("docker")
            else dict(args.inputs)
        )
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}

    def of_type(self, typ: str) -> list[pulumi.runtime.MockResourceArgs]:
        return [r for r in self.created if r.typ == typ]


@pytest.fixture
def mocks() -> ImageMocks:
    recorder = ImageMocks()
    pulumi.runtime.set_mocks(recorder, project=PROJECT, stack="test", preview=False)
    return recorder


def resolve(program: Callable[[], Mapping[str, Any]]) -> dict[str, tuple[Any, bool]]:
    """Run ``program`` under the mocks; ``(value, is_secret)`` of each Output it returns."""
    results: dict[str, tuple[Any, bool]] = {}

    @pulumi.runtime.test
    def run() -> pulumi.Output[None]:
        outputs = program()

        async def collect() -> None:
            for key, value in outputs.items():
                output = pulumi.Output.from_input(value)
                results[key] = (await output.future(), await output.is_secret())

        return pulumi.Output.from_input(collect())

    run()
    return results


def cloud_config(**overrides: Any) -> ImageConfig:
    values: dict[str, Any] = {
        "registry": REGISTRY,
        "registry_username": "ci-bot",
        "registry_password": pulumi.Output.from_input(PASSWORD),  # deliberately NOT secret
    }
    return ImageConfig(**{**values, **overrides})


def build_component(
    cfg: ImageConfig, *, gpu: bool, cluster_kind: str
) -> tuple[image.TrainerImageArgs, image.TrainerImage]:
    args = image.image_args(cfg, gpu=gpu, cluster_kind=cluster_kind)
    return args, image.TrainerImage("trainer", args)


# --- The pure builder. ---


@pytest.mark.parametrize(
    ("cluster_kind", "gpu", "name", "push", "pull", "extra"),
    [
        ("minikube", False, "tf-distributed-trainer:0.1.0", False, "Never", ""),
        ("minikube", True, "tf-distributed-trainer:0.1.0", False, "Never", "and-cuda"),
        ("cloud", False, f"{REGISTRY}/tf-distributed-trainer:0.1.0", True, "Always", ""),
        ("cloud", True, f"{REGISTRY}/tf-distributed-trainer:0.1.0", True, "Always", "and-cuda"),
        # A named cloud is a cloud: pushed, pulled by digest.
        ("gke", True, f"{REGISTRY}/tf-distributed-trainer:0.1.0", True, "Always", "and-cuda"),
        ("eks", False, f"{REGISTRY}/tf-distributed-trainer:0.1.0", True, "Always", ""),
        ("aks", True, f"{REGISTRY}/tf-distributed-trainer:0.1.0", True, "Always", "and-cuda"),
    ],
)
def test_image_args_per_cluster_kind(
    cluster_kind: str, gpu: bool, name: str, push: bool, pull: str, extra: str
) -> None:
    cfg = ImageConfig(registry=REGISTRY) if cluster_kind != "minikube" else ImageConfig()
    args = image.image_args(cfg, gpu=gpu, cluster_kind=cluster_kind)
    assert (args.image_name, args.push, args.pull_policy) == (name, push, pull)
    assert dict(args.build_args) == {image.BUILD_ARG_TF_EXTRA: extra}
    assert args.registry_server == (REGISTRY if push else None)
    # Relative to the working directory (the Pulumi project directory) by construction.
    assert Path(args.dockerfile).resolve() == image.DOCKERFILE, args.dockerfile
    assert Path(args.context).resolve() == image.REPO_ROOT, args.context


def test_image_args_passes_docker_daemon_settings() -> None:
    cfg = ImageConfig(docker_host="tcp://192.168.49.2:2376", docker_cert_path="/certs")
    args = image.image_args(cfg, gpu=False, cluster_kind="minikube")
    assert (args.docker_host, args.docker_cert_path) == ("tcp://192.168.49.2:2376", "/certs")


def test_minikube_drops_registry_credentials() -> None:
    args = image.image_args(cloud_config(), gpu=False, cluster_kind="minikube")
    assert (args.registry_server, args.registry_username, args.registry_password) == (
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("cfg", "cluster_kind", "match"),
    [
        (
            ImageConfig(),
            "openshift",
            r"clusterKind: must be one of minikube, cloud, gke, eks, aks; got 'openshift'",
        ),
        # A named cloud's missing registry: its registry's naming as the example.
        (ImageConfig(), "gke", r"required when clusterKind is 'gke' .*-docker\.pkg\.dev/"),
        (ImageConfig(), "eks", r"required when clusterKind is 'eks' .*\.dkr\.ecr\..*"),
        (ImageConfig(), "aks", r"required when clusterKind is 'aks' .*\.azurecr\.io"),
        (ImageConfig(tag="latest"), "minikube", r"imageTag: must be a fixed version"),
        (ImageConfig(tag="v1 beta"), "minikube", r"imageTag: must be a Docker tag.*'v1 beta'"),
        (ImageConfig(repository="Trainer"), "minikube", r"imageRepository: .*'Trainer'"),
        (ImageConfig(platform="amd64"), "minikube", r"imagePlatform: .*os/arch.*'amd64'"),
        (ImageConfig(), "cloud", r"imageRegistry: required when clusterKind is .cloud.*; got ''"),
        (ImageConfig(registry="https://r.io"), "cloud", r"imageRegistry: .*'https://r.io'"),
        (
            ImageConfig(registry=REGISTRY, registry_username="bot"),
            "cloud",
            r"imageRegistryUsername/imageRegistryPassword: set both.*password unset",
        ),
    ],
)
def test_image_args_rejects_bad_config(cfg: ImageConfig, cluster_kind: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        image.image_args(cfg, gpu=False, cluster_kind=cluster_kind)


@pytest.mark.parametrize(
    "digest",
    [None, "", f"{REGISTRY}/t:0.1.0", f"{REGISTRY}/t@sha256:abc", "sha256:" + "a" * 64],
)
def test_require_digest_ref_refuses_mutable_references(digest: str | None) -> None:
    with pytest.raises(image.ImageError, match=r"repoDigest must be '<repo>@sha256:<64 hex>'"):
        image.require_digest_ref(digest, "r/t:0.1.0")


# --- The component under mocks. ---


def test_cloud_image_ref_is_the_pushed_digest(mocks: ImageMocks) -> None:
    def program() -> dict[str, Any]:
        args, component = build_component(cloud_config(), gpu=True, cluster_kind="cloud")
        assert component.pull_policy == "Always"
        return {"ref": component.image_ref, "urn": component.image.urn}

    values = resolve(program)
    ref, secret = values["ref"]
    assert DIGEST_REF.match(ref) and ref.startswith(f"{REGISTRY}/tf-distributed-trainer@"), ref
    assert not secret, "image_ref must stay plain: a secret would hide the whole pod template"
    assert "TrainerImage$docker:index/image:Image" in values["urn"][0], "image not parented"
    (built,) = mocks.of_type(IMAGE_TYPE)
    assert built.inputs["skipPush"] is False
    assert built.inputs["build"]["args"] == {image.BUILD_ARG_TF_EXTRA: image.TF_EXTRA_GPU}
    assert built.inputs["buildOnPreview"] is False


def test_rebuild_changes_the_digest_reference(mocks: ImageMocks) -> None:
    """A different build (here: another base variant) yields another reference, so the
    StatefulSet's pod template changes and the workers roll."""

    def program() -> dict[str, Any]:
        _, cpu = build_component(cloud_config(), gpu=False, cluster_kind="cloud")
        gpu_args = image.image_args(cloud_config(), gpu=True, cluster_kind="cloud")
        gpu = image.TrainerImage("trainer-gpu", gpu_args)
        return {"cpu": cpu.image_ref, "gpu": gpu.image_ref}

    values = resolve(program)
    assert values["cpu"][0] != values["gpu"][0]


def test_minikube_uses_local_tag_never_pulled_nor_pushed(mocks: ImageMocks) -> None:
    def program() -> dict[str, Any]:
        cfg = ImageConfig(docker_host="tcp://192.168.49.2:2376", docker_cert_path="/m/certs")
        _, component = build_component(cfg, gpu=False, cluster_kind="minikube")
        assert component.pull_policy == "Never"
        return {"ref": component.image_ref, "content": component.content_id}

    values = resolve(program)
    assert values["ref"][0] == "tf-distributed-trainer:0.1.0"
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", values["content"][0]), values["content"]
    (built,) = mocks.of_type(IMAGE_TYPE)
    assert built.inputs["skipPush"] is True
    assert "registry" not in built.inputs, "a minikube build must not carry registry credentials"
    (provider,) = mocks.of_type(PROVIDER_TYPE)
    assert (provider.inputs.get("host"), provider.inputs.get("certPath")) == (
        "tcp://192.168.49.2:2376",
        "/m/certs",
    )


@pytest.mark.parametrize("cluster_kind", ["minikube", "cloud"])
def test_image_always_uses_the_explicit_docker_provider(
    mocks: ImageMocks, cluster_kind: str
) -> None:
    resolve(
        lambda: {
            "ref": build_component(cloud_config(), gpu=False, cluster_kind=cluster_kind)[
                1
            ].image_ref
        }
    )
    (built,) = mocks.of_type(IMAGE_TYPE)
    assert built.provider and f"{PROVIDER_TYPE}::trainer-docker" in built.provider, (
        f"docker.Image provider is {built.provider!r}: default providers are disabled"
    )


def test_registry_password_stays_secret(mocks: ImageMocks) -> None:
    def program() -> dict[str, Any]:
        args, component = build_component(cloud_config(), gpu=False, cluster_kind="cloud")
        return {
            "password": args.registry_password,
            "ref": component.image_ref,
            "name": component.image_name,
            "content": component.content_id,
        }

    values = resolve(program)
    assert values["password"] == (PASSWORD, True), "image_args must force the password secret"
    for key in ("ref", "name", "content"):
        assert PASSWORD not in str(values[key][0]), f"TrainerImage.{key} leaks the password"
    (built,) = mocks.of_type(IMAGE_TYPE)
    registry = built.inputs["registry"]
    assert is_rpc_secret(registry), "docker.Image received the registry block in plain text"
    assert unwrap_rpc_secret(registry)["password"] == PASSWORD
    assert PASSWORD not in str(built.inputs["build"]), "password reached the build (a layer)"
    assert "registry" not in image_mock.mock_image_outputs(IMAGE_TYPE, built.inputs)


def test_mock_outputs_are_deterministic_placeholders() -> None:
    inputs = {
        "imageName": f"{REGISTRY}/tf-distributed-trainer:0.1.0",
        "build": {"args": {"TF_EXTRA": ""}, "platform": "linux/amd64"},
        "skipPush": False,
    }
    first = image_mock.mock_image_outputs(IMAGE_TYPE, inputs)
    assert first == image_mock.mock_image_outputs(IMAGE_TYPE, dict(reversed(inputs.items())))
    assert first["repoDigest"].startswith(f"{REGISTRY}/tf-distributed-trainer@sha256:")
    assert image_mock.mock_image_outputs(PROVIDER_TYPE, {"host": "h"}) == {"host": "h"}


# --- The rendered stacks (the real program under the renderer's mocks). ---

PASSWORD_KEY = f"{PROJECT}:imageRegistryPassword"
USERNAME_KEY = f"{PROJECT}:imageRegistryUsername"


def _worker_container(result: render.Rendered) -> dict[str, Any]:
    pod = result.one("StatefulSet")["spec"]["template"]
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == CONTAINER_NAME]
    return container


@pytest.mark.parametrize(
    ("stack", "image_pattern", "pull_policy"),
    [
        (
            "prod",
            r"us-docker\.pkg\.dev/example-project/tfd/tf-distributed-trainer@sha256:[0-9a-f]{64}",
            "Always",
        ),
        ("dev", r"tf-distributed-trainer:0\.1\.0", "Never"),
    ],
)
def test_rendered_statefulset_runs_the_built_image(
    rendered: dict[str, render.Rendered], stack: str, image_pattern: str, pull_policy: str
) -> None:
    container = _worker_container(rendered[stack])
    assert re.fullmatch(image_pattern, container["image"]), (
        f"stack {stack}: StatefulSet image {container['image']!r} !~ {image_pattern}"
    )
    assert container["imagePullPolicy"] == pull_policy, f"stack {stack}: imagePullPolicy"
    assert "command" not in container, f"stack {stack}: the image ENTRYPOINT is the command"
    (built,) = [r for r in rendered[stack].resources if r.type == IMAGE_TYPE]
    assert built.inputs["skipPush"] is (stack == "dev"), f"stack {stack}: docker.Image skipPush"


class _RawImageRecorder(render.Recorder):
    """The renderer's recorder, also keeping the docker.Image inputs before redaction."""

    def __init__(self) -> None:
        super().__init__()
        self.raw_image_inputs: list[dict[str, Any]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        if args.typ == IMAGE_TYPE:
            self.raw_image_inputs.append(args.inputs)
        return super().new_resource(args)


def test_rendered_stack_never_holds_the_registry_password(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Render prod with a recognisable registry password: it reaches the push as a secret and
    no rendered file or stack output contains it."""
    original = render.stack_config

    def with_password(*args: Any, **kwargs: Any) -> tuple[dict[str, str], list[str]]:
        values, secret_keys = original(*args, **kwargs)
        values[PASSWORD_KEY] = PASSWORD  # what `secure:` would decrypt to under `pulumi up`
        return values, secret_keys

    monkeypatch.setattr(render, "stack_config", with_password)
    recorder = _RawImageRecorder()
    result = render.render_stack(
        "prod",
        overrides={PASSWORD_KEY: {"secure": "v1:ciphertext"}, USERNAME_KEY: "ci-bot"},
        recorder=recorder,
    )
    (raw,) = recorder.raw_image_inputs
    assert is_rpc_secret(raw["registry"]), "stack prod: registry credentials reached in clear"
    assert unwrap_rpc_secret(raw["registry"])["password"] == PASSWORD, "password never arrived"

    render.write_rendered(result, tmp_path)
    files = sorted(tmp_path.rglob("*.yaml"))
    assert files, f"nothing rendered under {tmp_path}"
    leaks = [str(p.relative_to(tmp_path)) for p in files if PASSWORD in p.read_text()]
    assert not leaks, f"stack prod: registry password in clear in {leaks}"
    assert PASSWORD not in repr(result.outputs), "stack prod: password in the stack outputs"


# --- A prebuilt image (imageReference). ---

PREBUILT_DIGEST_REF = "registry.example/tfd/trainer@sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("stack", "reference", "pull_policy"),
    [
        ("dev", "tf-distributed-trainer:0.1.0-ci", "IfNotPresent"),
        ("prod", PREBUILT_DIGEST_REF, "Always"),
    ],
)
def test_prebuilt_reference_is_deployed_without_any_build(
    stack: str, reference: str, pull_policy: str
) -> None:
    result = render.render_stack(stack, {f"{PROJECT}:imageReference": reference})
    container = _worker_container(result)
    assert (container["image"], container["imagePullPolicy"]) == (reference, pull_policy), (
        f"stack {stack}: StatefulSet container {container}"
    )
    docker = [r.type for r in result.resources if r.type.startswith("docker:")]
    assert docker == [], f"stack {stack}: a prebuilt image still registered {docker}"
    assert result.outputs["image"] == reference, f"stack {stack}: image output"


def test_prebuilt_image_refuses_a_mutable_reference_on_cloud() -> None:
    with pytest.raises(ConfigError, match="pinned by digest"):
        image.prebuilt_image(ImageConfig(reference="trainer:1.0"), cluster_kind="cloud")
    assert image.prebuilt_image(ImageConfig(), cluster_kind="cloud") is None


# --- The user's code (codeDirectory): a second image FROM the trainer image. ---

USER_CODE = "tests/e2e/user_code"


@pytest.mark.parametrize(
    ("cluster_kind", "name"),
    [
        ("minikube", "tf-distributed-trainer:0.1.0-code"),
        ("cloud", f"{REGISTRY}/tf-distributed-trainer:0.1.0-code"),
    ],
)
def test_image_args_with_code_directory(cluster_kind: str, name: str) -> None:
    cfg = ImageConfig(registry=REGISTRY, code_directory=USER_CODE)
    args = image.image_args(cfg, gpu=False, cluster_kind=cluster_kind)
    assert args.code is not None, f"{cluster_kind}: codeDirectory built no code image"
    assert args.code.image_name == name, f"{cluster_kind}: code image name"
    assert Path(args.code.context).resolve() == image.REPO_ROOT / USER_CODE, args.code.context
    assert Path(args.code.dockerfile).resolve() == image.CODE_DOCKERFILE, args.code.dockerfile
    assert not Path(args.code.context).is_absolute(), "state must not hold the checkout's path"
    assert args.image_name == name.removesuffix("-code"), "the trainer image keeps its name"


def test_image_args_without_code_directory_build_the_trainer_image_alone() -> None:
    assert image.image_args(ImageConfig(), gpu=False, cluster_kind="minikube").code is None


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (ImageConfig(code_directory="trainer"), r"codeDirectory: must not be inside the trainer"),
        (ImageConfig(code_directory="/opt/code"), r"codeDirectory: .*not an absolute path"),
        (ImageConfig(code_directory="nowhere"), r"codeDirectory: must name an existing dir"),
    ],
)
def test_image_args_refuse_a_bad_code_directory(cfg: ImageConfig, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        image.image_args(cfg, gpu=False, cluster_kind="minikube")


def test_a_prebuilt_image_takes_no_code_directory() -> None:
    cfg = ImageConfig(reference="registry.example/t@sha256:" + "a" * 64, code_directory=USER_CODE)
    with pytest.raises(ConfigError, match=r"codeDirectory: must be empty when imageReference"):
        image.prebuilt_image(cfg, cluster_kind="cloud")


@pytest.mark.parametrize("cluster_kind", ["minikube", "cloud"])
def test_code_image_is_built_from_the_trainer_image_and_run_by_the_workers(
    mocks: ImageMocks, cluster_kind: str
) -> None:
    def program() -> dict[str, Any]:
        cfg = cloud_config(code_directory=USER_CODE)
        args, component = build_component(cfg, gpu=False, cluster_kind=cluster_kind)
        assert component.code_image is not None
        return {
            "ref": component.image_ref,
            "content": component.content_id,
            "name": component.image_name,
            "trainer_digest": component.image.repo_digest,
            "trainer_name": component.image.image_name,
            "code_digest": component.code_image.repo_digest,
            "code_urn": component.code_image.urn,
        }

    values = {key: value for key, (value, _) in resolve(program).items()}
    trainer, code = sorted(mocks.of_type(IMAGE_TYPE), key=lambda r: r.name)
    assert (trainer.name, code.name) == ("trainer", "trainer-code"), "image resource names"
    assert "TrainerImage$docker:index/image:Image" in values["code_urn"], "code image not parented"
    assert code.provider == trainer.provider, "the code image must use the same docker provider"
    build = code.inputs["build"]
    assert Path(build["dockerfile"]).resolve() == image.CODE_DOCKERFILE, build["dockerfile"]
    assert Path(build["context"]).resolve() == image.REPO_ROOT / USER_CODE, build["context"]
    assert build["platform"] == trainer.inputs["build"]["platform"], "code image platform"
    assert code.inputs["skipPush"] is trainer.inputs["skipPush"], "code image skipPush"
    assert code.inputs["buildOnPreview"] is False, "a preview must not build the code image"
    # FROM: the trainer's pushed digest on cloud, its local tag on minikube; plus its digest/ID.
    base = values["trainer_digest"] if cluster_kind == "cloud" else values["trainer_name"]
    trainer_id = values["trainer_digest"].rpartition("@")[2]
    assert build["args"] == {
        image.BUILD_ARG_TRAINER_IMAGE: base,
        image.BUILD_ARG_TRAINER_IMAGE_ID: trainer_id,
    }, f"{cluster_kind}: code image build args"
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", trainer_id), trainer_id
    # The workers run the code image: its digest on cloud, its tag (and ID) on minikube.
    assert values["content"] == values["code_digest"], "content_id must follow the code image"
    assert values["content"] != values["trainer_digest"], "workers would roll on the wrong image"
    if cluster_kind == "cloud":
        assert values["ref"] == values["code_digest"], "workers must run the code image digest"
        assert values["ref"].startswith(f"{REGISTRY}/tf-distributed-trainer@sha256:")
        assert code.inputs["imageName"] == f"{REGISTRY}/tf-distributed-trainer:0.1.0-code"
    else:
        assert values["ref"] == values["name"] == "tf-distributed-trainer:0.1.0-code"


def test_a_rebuilt_trainer_image_changes_the_code_image() -> None:
    """Another trainer build (here another base variant) changes the code image's build inputs
    (its FROM digest and the trainer image ID), so pulumi-docker rebuilds it and the workers
    roll; a reused tag on minikube alone would not show the change."""
    recorders = []
    refs = []
    cfg = ImageConfig(code_directory=USER_CODE)
    for gpu in (False, True):
        recorder = ImageMocks()
        pulumi.runtime.set_mocks(recorder, project=PROJECT, stack="test", preview=False)

        def program(gpu: bool = gpu) -> dict[str, Any]:
            args = image.image_args(cfg, gpu=gpu, cluster_kind="minikube")
            return {"content": image.TrainerImage("trainer", args).content_id}

        refs.append(resolve(program)["content"][0])
        recorders.append(recorder)
    (cpu_code,), (gpu_code,) = (
        [r for r in rec.of_type(IMAGE_TYPE) if r.name == "trainer-code"] for rec in recorders
    )
    cpu_id = cpu_code.inputs["build"]["args"][image.BUILD_ARG_TRAINER_IMAGE_ID]
    gpu_id = gpu_code.inputs["build"]["args"][image.BUILD_ARG_TRAINER_IMAGE_ID]
    assert cpu_id != gpu_id, "the trainer image ID must reach the code image's build args"
    assert refs[0] != refs[1], "the workers' rollout annotation must change with the trainer"


@pytest.mark.parametrize(("stack", "push"), [("dev", False), ("prod", True)])
def test_rendered_stack_with_code_directory_runs_the_code_image(stack: str, push: bool) -> None:
    result = render.render_stack(stack, {f"{PROJECT}:codeDirectory": USER_CODE})
    images = {r.name: r for r in result.resources if r.type == IMAGE_TYPE}
    assert set(images) == {"trainer", "trainer-code"}, f"stack {stack}: images {sorted(images)}"
    container = _worker_container(result)
    template = result.one("StatefulSet")["spec"]["template"]
    code_name = images["trainer-code"].inputs["imageName"]
    assert code_name.endswith("tf-distributed-trainer:0.1.0-code"), code_name
    if push:
        # The mocks' digest of the code image: a function of its inputs (image_mock).
        expected = image_mock.mock_image_outputs(IMAGE_TYPE, images["trainer-code"].inputs)
        assert container["image"] == expected["repoDigest"], f"stack {stack}: StatefulSet image"
        assert DIGEST_REF.match(container["image"]), f"stack {stack}: {container['image']!r}"
    else:
        assert container["image"] == code_name, f"stack {stack}: StatefulSet image"
    annotation = template["metadata"]["annotations"]["tf-distributed.io/image-id"]
    base = render.render_stack(stack)
    base_annotation = base.one("StatefulSet")["spec"]["template"]["metadata"]["annotations"][
        "tf-distributed.io/image-id"
    ]
    assert annotation != base_annotation, f"stack {stack}: rollout annotation unchanged"
    assert result.outputs["image"] == container["image"], f"stack {stack}: image output"


def test_the_documented_user_settings_reach_the_workers() -> None:
    """docs/trainer.md's three settings: the code image, the user's model, the data in it."""
    result = render.render_stack(
        "dev",
        {
            f"{PROJECT}:codeDirectory": USER_CODE,
            f"{PROJECT}:dataset": f"{image.CODE_PATH}/data",
            f"{PROJECT}:trainerFlags": ["model=my_model:build"],
        },
    )
    container = _worker_container(result)
    assert container["image"] == "tf-distributed-trainer:0.1.0-code", "dev: StatefulSet image"
    args = container["args"]
    for flag, value in (("--model", "my_model:build"), ("--dataset", f"{image.CODE_PATH}/data")):
        assert flag in args and args[args.index(flag) + 1] == value, f"dev: container args {args}"


@pytest.mark.parametrize(
    ("name", "repo"),
    [
        ("tf-distributed-trainer:0.1.0", "tf-distributed-trainer"),
        ("127.0.0.1:5443/tfd/trainer:e2e", "127.0.0.1:5443/tfd/trainer"),
        ("registry.example.com/a/b", "registry.example.com/a/b"),
    ],
)
def test_repository_drops_only_the_tag(name: str, repo: str) -> None:
    assert image_mock.repository(name) == repo
