"""The rules of the trainer image settings, written once: :func:`infra.config.parse_config`
reports them with every other problem, and ``infra/image.py`` refuses the same when called
directly."""

from __future__ import annotations

import re
from pathlib import Path

from infra.config.clouds import CLOUDS
from infra.config.code_dir import DOCKERIGNORE, STARTER, shipped_credentials
from infra.config.errors import PROJECT, problem
from infra.config.kinds import PROJECT_DIR
from infra.config.model import ImageConfig

# Docker reference grammar, simplified: a repository is lowercase path components; a registry
# is a host with an optional port and path.
_IMAGE_REPOSITORY = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
_IMAGE_REGISTRY = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# A prebuilt image: [registry/]repository[:tag] and/or @sha256:<64 hex>.
_IMAGE_REFERENCE = re.compile(
    r"^(?P<name>([A-Za-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*)"
    r"(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
_IMAGE_PLATFORM = re.compile(r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$")
_TAG_LONGEST = 128

CODE_TAG_SUFFIX = "-code"
"""Appended to ``imageTag`` for the image that adds ``codeDirectory`` to the trainer image: the
same repository (a registry such as ECR needs every repository created beforehand), another
tag."""
TRAINER_PACKAGE = "trainer"
"""The trainer's own package directory (under the project directory): never user code."""


def image_problems(cfg: ImageConfig, *, push: bool, cluster_kind: str = "cloud") -> list[str]:
    """Every rule the image settings break, one ``<key>: <rule>; got <value>`` line each.

    The one definition of the image rules: :func:`parse_config` merges these into its problems
    (so they stop a run before any resource exists) and :func:`infra.image.image_args` refuses
    the same when called directly.

    Args:
        cfg: the image settings.
        push: the image is pushed to ``cfg.registry`` (every ``clusterKind`` but minikube): a
            registry is then required, and a registry user and password go together.
        cluster_kind: the ``clusterKind`` pushing, named in messages (with its registry's
            naming where :mod:`infra.config.clouds` knows it).
    """
    problems: list[str] = []
    if cfg.code_directory is not None:
        problems += code_directory_problems(cfg.code_directory)
    if cfg.reference is not None:
        if cfg.code_directory is not None:
            problems.append(
                problem(
                    "codeDirectory",
                    "must be empty when imageReference is set (a prebuilt image is deployed as "
                    "it is; add your code to it when you build it)",
                    cfg.code_directory,
                )
            )
        return problems + _reference_problems(cfg.reference, pinned=push, kind=cluster_kind)

    def check(key: str, value: str | None, pattern: re.Pattern[str], rule: str) -> None:
        if value is None or not pattern.match(value):
            problems.append(f"{PROJECT}:{key}: must be {rule}; got {value!r}")

    check(
        "imageRepository", cfg.repository, _IMAGE_REPOSITORY, "a lowercase Docker repository path"
    )
    check("imageTag", cfg.tag, _IMAGE_TAG, "a Docker tag ([A-Za-z0-9_.-], at most 128)")
    if cfg.tag == "latest":
        problems.append(f"{PROJECT}:imageTag: must be a fixed version, not 'latest'; got 'latest'")
    longest = _TAG_LONGEST - len(CODE_TAG_SUFFIX)
    if cfg.code_directory is not None and cfg.tag is not None and len(cfg.tag) > longest:
        problems.append(
            problem(
                "imageTag",
                f"must be at most {longest} characters with codeDirectory (the code image's "
                f"tag adds {CODE_TAG_SUFFIX!r})",
                cfg.tag,
            )
        )
    check("imagePlatform", cfg.platform, _IMAGE_PLATFORM, "'os/arch[/variant]', e.g. linux/arm64")
    if not push:
        return problems
    if not cfg.registry:
        cloud = CLOUDS.get(cluster_kind)
        example = f", e.g. {cloud.registry_example!r}" if cloud else ""
        problems.append(
            f"{PROJECT}:imageRegistry: required when clusterKind is {cluster_kind!r} (images "
            f"are pushed{example}); got {cfg.registry or ''!r}"
        )
    else:
        check("imageRegistry", cfg.registry, _IMAGE_REGISTRY, "a registry 'host[:port][/path]'")
    has_user = bool(cfg.registry_username)
    has_password = cfg.registry_password is not None
    if has_user != has_password:
        problems.append(
            f"{PROJECT}:imageRegistryUsername/imageRegistryPassword: set both, or neither "
            "to use the host's `docker login`; got "
            f"username {'set' if has_user else 'unset'}, "
            f"password {'set' if has_password else 'unset'}"
        )
    return problems


def _reference_problems(reference: str, *, pinned: bool, kind: str) -> list[str]:
    """The rules of ``imageReference``: a Docker reference, never ``latest``, and pinned by
    digest where ``pinned`` (cloud stacks, whose nodes pull from a registry)."""
    key = f"{PROJECT}:imageReference"
    match = _IMAGE_REFERENCE.match(reference)
    if match is None:
        return [
            f"{key}: must be an image reference '[registry/]repo[:tag][@sha256:<64 hex>]'; "
            f"got {reference!r}"
        ]
    if match["tag"] is None and match["digest"] is None:
        return [
            f"{key}: must name a tag or a digest (an untagged name means 'latest'); "
            f"got {reference!r}"
        ]
    if match["tag"] == "latest":
        return [f"{key}: must be a fixed version, not 'latest'; got {reference!r}"]
    if pinned and match["digest"] is None:
        return [
            f"{key}: must be pinned by digest ('...@sha256:<64 hex>') when clusterKind is "
            f"{kind!r}; got {reference!r}"
        ]
    return []


def code_directory_problems(name: str, project_dir: Path = PROJECT_DIR) -> list[str]:
    """The rules of ``codeDirectory``: a directory, named relative to the project directory (so
    the stack's state does not depend on where the checkout lives), that exists, and that is
    neither the project directory, nor one holding it, nor inside the trainer package (the
    trainer is in the image already; a context holding the project would ship its state,
    environments and version control)."""
    rule = _code_directory_rule(name, project_dir)
    return [] if rule is None else [problem("codeDirectory", rule, name)]


def _code_directory_rule(name: str, project_dir: Path) -> str | None:
    if Path(name).is_absolute():
        return "must be a directory relative to the project directory, not an absolute path"
    path = (project_dir / name).resolve()
    if not path.exists():
        return "must name an existing directory (relative to the project directory)"
    if not path.is_dir():
        return "must name a directory, not a file"
    root = project_dir.resolve()
    if path == root or path in root.parents:
        return "must not be the project directory or hold it (name the directory of your code)"
    if not path.is_relative_to(root):
        return "must be inside the project directory (a relative path that stays in it)"
    if path.is_relative_to(root / TRAINER_PACKAGE):
        return f"must not be inside the trainer package ({TRAINER_PACKAGE}/), already in the image"
    shipped = shipped_credentials(path)
    if shipped:
        named = ", ".join(shipped[:3]) + (f" and {len(shipped) - 3} more" if shipped[3:] else "")
        ignore = f"{name.rstrip('/')}/{DOCKERIGNORE}"
        return (
            f"would copy {named} into the pushed image: exclude it in {ignore} "
            f"(e.g. {STARTER}) or move it out"
        )
    return None
