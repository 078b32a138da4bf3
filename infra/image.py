"""The trainer image: built (and for cloud stacks pushed) by the stack, rolled out by reference.

:func:`image_args` is a pure function from the image config to everything the build needs;
:class:`TrainerImage` turns those arguments into a ``docker.Image`` (pulumi-docker 5.x) behind
its own explicit ``docker.Provider`` and exposes the two values the worker StatefulSet uses:

* ``image_ref``: for cloud stacks the immutable digest reference ``<registry>/<repo>@sha256:<hex>``
  of what was pushed, so every rebuild changes the pod template and rolls the StatefulSet and
  nothing ever runs a mutable tag; for minikube the local tag ``<repo>:<tag>``, built straight
  into minikube's Docker daemon.
* ``pull_policy``: ``Never`` on minikube (the image exists only in that daemon), ``Always`` on
  cloud (with a digest reference the kubelet only re-checks the manifest; layers stay cached).

With ``codeDirectory`` set, a second ``docker.Image`` is built ``FROM`` the first
(``code-image/Dockerfile``, the user's directory as its context, tag ``<imageTag>-code``) and
the workers run that one instead, by the same rules: its digest on cloud, its local tag and
image ID on minikube. pulumi-docker hashes a context into the image's inputs (``contextDigest``),
so a change to the user's files rebuilds it, and the new digest or ID rolls the workers.

The registry password is a Pulumi secret from end to end: it is forced secret here, goes only
to the ``registry`` input of ``docker.Image`` (never a build argument, so never in a layer) and
is never registered as an output.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_docker as docker

from infra.component import Component
from infra.config import (
    CLUSTER_KINDS,
    PROJECT,
    ConfigError,
    ImageConfig,
    image_problems,
    is_cloud,
)
from infra.config.image import CODE_TAG_SUFFIX
from infra.config.kinds import PROJECT_DIR
from trainer import contract

COMPONENT_TYPE = "tfd:infra:TrainerImage"

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The build context: the repository root (``.dockerignore`` keeps it down to ``trainer/``)."""
DOCKERFILE = REPO_ROOT / "Dockerfile"
CODE_DOCKERFILE = REPO_ROOT / "code-image" / "Dockerfile"
"""The Dockerfile of the image with the user's code (outside its context, which pulumi-docker
5 adds to the build itself, as ``docker build -f`` does)."""
CODE_PATH = "/opt/tfd/code"
"""Where ``codeDirectory`` lands in the image (on ``PYTHONPATH``, after the trainer's own path)."""
BUILD_ARG_TRAINER_IMAGE = "TRAINER_IMAGE"
"""Build argument of ``code-image/Dockerfile``: the reference of the trainer image it is built
``FROM`` (the local tag on minikube, the pushed digest reference on cloud)."""
BUILD_ARG_TRAINER_IMAGE_ID = "TRAINER_IMAGE_ID"
"""Build argument of ``code-image/Dockerfile``: the trainer image's ``sha256:`` digest or ID;
it changes with every trainer build, so the code image is rebuilt on a reused tag too."""

TF_VERSION = "2.21.0"
"""TensorFlow version of the base image; the Dockerfile pins the same (a test compares)."""
BASE_IMAGE = f"tensorflow/tensorflow:{TF_VERSION}"
"""The one base image, CPU and GPU builds alike."""
BUILD_ARG_TF_EXTRA = "TF_EXTRA"
"""Build argument naming TensorFlow's pip extra to install at the base's version: ``""`` for
CPU, :data:`TF_EXTRA_GPU` for GPU stacks."""
TF_EXTRA_GPU = "and-cuda"
"""``tensorflow[and-cuda]``: CUDA, cuDNN and NCCL as wheels, at the versions TensorFlow pins."""

IMAGE_UID = 10001
"""Numeric user the image runs as (Dockerfile ``USER``); pods may set the same ``runAsUser``."""
IMAGE_GID = 10001

PULL_NEVER = "Never"
PULL_ALWAYS = "Always"
PULL_IF_NOT_PRESENT = "IfNotPresent"

_DIGEST_REF = re.compile(r"^(?P<repo>[^@\s]+)@sha256:(?P<hex>[0-9a-f]{64})$")


class ImageError(RuntimeError):
    """A build or push returned something the workers cannot be pinned to (no digest)."""


def extra_build_args(gpu: bool) -> tuple[tuple[str, str], ...]:
    """The ``--build-arg`` pairs of a CPU or a GPU build."""
    return ((BUILD_ARG_TF_EXTRA, TF_EXTRA_GPU if gpu else ""),)


@dataclass(frozen=True)
class CodeImageArgs:
    """The image with the user's code (``codeDirectory``), built ``FROM`` the trainer image.

    Attributes:
        image_name: the trainer image's name with :data:`CODE_TAG_SUFFIX` after its tag.
        context: the user's directory, relative to the working directory like the trainer's.
        dockerfile: :data:`CODE_DOCKERFILE`, relative the same way.
    """

    image_name: str
    context: str
    dockerfile: str


@dataclass(frozen=True)
class TrainerImageArgs:
    """Everything :class:`TrainerImage` needs; built by :func:`image_args`.

    Attributes:
        image_name: ``<repo>:<tag>`` (minikube) or ``<registry>/<repo>:<tag>`` (cloud).
        context: build context, relative to the working directory when under it (the Pulumi
            project directory), so stack state does not depend on where the checkout lives.
        dockerfile: path of the Dockerfile, relative like ``context``.
        build_args: ``(name, value)`` pairs passed as ``--build-arg``; never secrets.
        platform: target ``os/arch`` of the build, e.g. ``linux/amd64``.
        push: push to ``registry_server`` (cloud) or keep the image in the daemon (minikube).
        pull_policy: ``imagePullPolicy`` for the worker container.
        registry_server: registry host (and optional path) for cloud stacks, else ``None``.
        registry_username: registry user; ``None`` uses the Docker credentials of the host.
        registry_password: secret registry password; ``None`` with ``registry_username=None``.
        docker_host: Docker daemon address (``DOCKER_HOST`` form); ``None`` uses the provider's
            default (the ``DOCKER_HOST`` environment variable, else the local socket).
        docker_cert_path: directory with the daemon's TLS ``ca.pem``/``cert.pem``/``key.pem``.
        code: the image with the user's code that the workers run instead; ``None``: they run
            the trainer image.
    """

    image_name: str
    context: str
    dockerfile: str
    build_args: tuple[tuple[str, str], ...]
    platform: str
    push: bool
    pull_policy: str
    registry_server: str | None = None
    registry_username: str | None = None
    registry_password: pulumi.Output[str] | None = None
    docker_host: str | None = None
    docker_cert_path: str | None = None
    code: CodeImageArgs | None = None


def _relative(path: Path) -> str:
    try:
        return os.path.relpath(path, Path.cwd())
    except ValueError:  # another drive (Windows): keep the absolute path
        return str(path)


def image_args(cfg: ImageConfig, *, gpu: bool, cluster_kind: str) -> TrainerImageArgs:
    """Pure builder of the trainer image arguments for one stack.

    Args:
        cfg: the stack's image configuration (:class:`infra.config.ImageConfig`).
        gpu: add TensorFlow's CUDA wheels (``tensorflow[and-cuda]``) to the base image.
        cluster_kind: ``minikube`` (build into the cluster's Docker daemon, no push, pull policy
            ``Never``) or any cloud kind, ``cloud``, ``gke``, ``eks``, ``aks`` (push to
            ``cfg.registry``, pull by digest).

    Raises:
        ConfigError: one line per problem (unknown cluster kind, and every rule of
            :func:`infra.config.image_problems`), each naming the config key, the rule and the
            value. :func:`infra.config.parse_config` applies the same rules, so a stack run
            stops there, before any resource exists.
    """
    problems: list[str] = []
    if cluster_kind not in CLUSTER_KINDS:
        problems.append(
            f"{PROJECT}:clusterKind: must be one of {', '.join(CLUSTER_KINDS)}; "
            f"got {cluster_kind!r}"
        )
    push = is_cloud(cluster_kind)
    problems += image_problems(cfg, push=push, cluster_kind=cluster_kind)
    if problems:
        raise ConfigError(problems)

    name = f"{cfg.repository}:{cfg.tag}"
    image_name = f"{cfg.registry}/{name}" if push else name
    code = None
    if cfg.code_directory is not None:
        code = CodeImageArgs(
            image_name=f"{image_name}{CODE_TAG_SUFFIX}",
            context=_relative((PROJECT_DIR / cfg.code_directory).resolve()),
            dockerfile=_relative(CODE_DOCKERFILE),
        )
    return TrainerImageArgs(
        image_name=image_name,
        context=_relative(REPO_ROOT),
        dockerfile=_relative(DOCKERFILE),
        build_args=extra_build_args(gpu),
        platform=cfg.platform,
        push=push,
        pull_policy=PULL_ALWAYS if push else PULL_NEVER,
        registry_server=cfg.registry if push else None,
        registry_username=(cfg.registry_username or None) if push else None,
        registry_password=(
            pulumi.Output.secret(cfg.registry_password)
            if push and cfg.registry_password is not None
            else None
        ),
        docker_host=cfg.docker_host,
        docker_cert_path=cfg.docker_cert_path,
        code=code,
    )


@dataclass(frozen=True)
class PrebuiltImage:
    """A prebuilt image (``imageReference``): nothing is built or pushed, the workers run it.

    Attributes:
        image_ref: the reference as configured.
        pull_policy: ``Always`` on cloud stacks (a digest: the kubelet only re-checks the
            manifest); ``IfNotPresent`` on minikube, where the image may have been loaded into
            the node (``minikube image load``) or be pulled from a registry.
        content_id: the reference again, for the pod-template annotation: a new digest rolls the
            workers (a re-pointed tag does not; pin by digest to roll on every new build).
    """

    image_ref: str
    pull_policy: str
    content_id: str


def prebuilt_image(cfg: ImageConfig, *, cluster_kind: str) -> PrebuiltImage | None:
    """The prebuilt image of ``cfg.reference``, or ``None`` when the stack builds its image.

    Raises:
        ConfigError: the reference breaks a rule of :func:`infra.config.image_problems`.
    """
    if cfg.reference is None:
        return None
    cloud = is_cloud(cluster_kind)
    problems = image_problems(cfg, push=cloud, cluster_kind=cluster_kind)
    if problems:
        raise ConfigError(problems)
    return PrebuiltImage(
        image_ref=cfg.reference,
        pull_policy=PULL_ALWAYS if cloud else PULL_IF_NOT_PRESENT,
        content_id=cfg.reference,
    )


def require_digest_ref(repo_digest: str | None, image_name: str) -> str:
    """Return ``repo_digest`` if it is ``<repo>@sha256:<64 hex>``.

    Raises:
        ImageError: the push returned no digest reference (the workers would otherwise run a
            mutable tag).
    """
    if not repo_digest or not _DIGEST_REF.match(repo_digest):
        raise ImageError(
            f"docker.Image {image_name!r}: repoDigest must be '<repo>@sha256:<64 hex>' after a "
            f"push; got {repo_digest!r}"
        )
    return repo_digest


class TrainerImage(Component):
    """Builds the trainer image (and pushes it for cloud stacks), then, with ``args.code``, the
    image with the user's code on top of it.

    Attributes:
        image: the trainer's ``docker.Image`` child.
        code_image: the ``docker.Image`` child with the user's code; ``None`` without
            ``args.code``.
        image_ref: the container ``image`` for the worker StatefulSet (see module docstring):
            of the code image when there is one, else of the trainer image.
        pull_policy: the container ``imagePullPolicy`` (``Never`` or ``Always``).
        image_name: the tagged name the workers run (``<repo>:<tag>[-code]``, with the registry
            on cloud).
        content_id: changes whenever the image the workers run changes (the image ID on
            minikube, the digest reference on cloud). On minikube ``image_ref`` is a reused
            tag, so put this into a pod-template annotation to roll the workers after a rebuild.
    """

    image: docker.Image
    code_image: docker.Image | None
    image_ref: pulumi.Output[str]
    pull_policy: str
    image_name: pulumi.Output[str]
    content_id: pulumi.Output[str]

    def __init__(
        self, name: str, args: TrainerImageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(COMPONENT_TYPE, name, opts)
        # Default providers are disabled stack-wide: the image always gets this explicit one.
        provider = docker.Provider(
            f"{name}-docker",
            host=args.docker_host,
            cert_path=args.docker_cert_path,
            opts=self.child_opts(),
        )
        registry = None
        if args.push:
            registry = docker.RegistryArgs(
                server=args.registry_server,
                username=args.registry_username,
                # Secret again in case the args were built by hand rather than by image_args.
                password=(
                    pulumi.Output.secret(args.registry_password)
                    if args.registry_password is not None
                    else None
                ),
            )

        def build(
            resource: str,
            image_name: str,
            context: str,
            dockerfile: str,
            build_args: Mapping[str, pulumi.Input[str]],
        ) -> docker.Image:
            return docker.Image(
                resource,
                image_name=image_name,
                build=docker.DockerBuildArgs(
                    context=context,
                    dockerfile=dockerfile,
                    args=dict(build_args),
                    platform=args.platform,
                    builder_version=docker.BuilderVersion.BUILDER_BUILD_KIT,
                ),
                skip_push=not args.push,
                registry=registry,
                # A preview must not spend minutes building a multi-GB image.
                build_on_preview=False,
                opts=self.child_opts(provider=provider),
            )

        self.image = build(
            name, args.image_name, args.context, args.dockerfile, dict(args.build_args)
        )
        self.code_image = None
        built = self.image
        self.image_ref = self._ref(self.image, args.image_name, push=args.push)
        if args.code is not None:
            # Inputs from the trainer image's outputs: built after it, and again when it changes.
            built = self.code_image = build(
                f"{name}-code",
                args.code.image_name,
                args.code.context,
                args.code.dockerfile,
                {
                    BUILD_ARG_TRAINER_IMAGE: self.image_ref,
                    BUILD_ARG_TRAINER_IMAGE_ID: self.image.repo_digest.apply(contract.image_digest),
                },
            )
            self.image_ref = self._ref(built, args.code.image_name, push=args.push)
        self.pull_policy = args.pull_policy
        self.image_name = built.image_name
        self.content_id = built.repo_digest
        self.register_outputs(
            {
                "image_ref": self.image_ref,
                "image_name": self.image_name,
                "pull_policy": self.pull_policy,
            }
        )

    @staticmethod
    def _ref(image: docker.Image, image_name: str, *, push: bool) -> pulumi.Output[str]:
        """What runs ``image``: its pushed digest reference (cloud), else its local tag."""
        if push:
            return image.repo_digest.apply(lambda digest: require_digest_ref(digest, image_name))
        # Derived from the resource's output (not the input string) so that what uses it
        # depends on the build and never starts before the image exists in the daemon.
        return image.image_name
