"""The stand-in Docker provider's own rules: what changes a build context's digest, and what
its diff reports (the e2e, tests/e2e/test_image_build.py, runs it under the real engine)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pulumi.provider.experimental.provider as p
import pytest

from tools.docker_provider import StandInDocker, context_digest, wrap


def _context(tmp_path: Path) -> Path:
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY app /app\n")
    (tmp_path / ".dockerignore").write_text("*.log\nsecret/\n!secret/keep.txt\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print(1)\n")
    (tmp_path / "run.log").write_text("noise\n")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key").write_text("k\n")
    (tmp_path / "secret" / "keep.txt").write_text("kept\n")
    return tmp_path


@pytest.mark.parametrize(
    ("path", "changes"),
    [
        ("app/main.py", True),
        ("app/new.py", True),
        ("Dockerfile", True),
        ("secret/keep.txt", True),  # re-included by its `!` line
        ("run.log", False),
        ("other.log", False),
        ("secret/key", False),
    ],
)
def test_the_context_digest_moves_only_with_what_docker_build_sends(
    tmp_path: Path, path: str, changes: bool
) -> None:
    context = _context(tmp_path)
    before = context_digest(context, context / "Dockerfile")
    (context / path).write_text((context / path).read_text() + "x" if (context / path).exists()
                                else "new\n")  # fmt: skip
    after = context_digest(context, context / "Dockerfile")
    assert (before != after) is changes, f"{path}: digest {'kept' if changes else 'moved'}"


STATE = {
    "imageName": "r:5000/t:1",
    "build": {"context": ".", "contextDigest": "sha256:aa"},
    "skipPush": False,
    "registryServer": "r:5000",
}


@pytest.mark.parametrize(
    ("news", "diffs"),
    [
        ({"registry": {"server": "r:5000", "username": "u", "password": "other"}}, []),
        ({"registry": {"server": "r:6000", "username": "u", "password": "p"}}, ["registry"]),
        ({"build": {"context": ".", "contextDigest": "sha256:bb"}}, ["build"]),
        ({"imageName": "r:5000/t:2"}, ["imageName"]),
    ],
)
def test_the_diff_names_what_rebuilds_and_a_new_password_alone_rebuilds_nothing(
    news: dict, diffs: list[str]
) -> None:
    inputs = {
        "imageName": STATE["imageName"],
        "build": STATE["build"],
        "skipPush": False,
        "registry": {"server": "r:5000", "username": "u", "password": "p"},
    } | news
    request = p.DiffRequest(
        "urn:pulumi:s::p::docker:index/image:Image::img",
        "id",
        {k: wrap(v) for k, v in STATE.items()},
        {k: wrap(v) for k, v in inputs.items()},
        [],
    )
    # Its own loop: asyncio.run would leave the thread without one for the render tests after.
    loop = asyncio.new_event_loop()
    try:
        response = loop.run_until_complete(StandInDocker().diff(request))
    finally:
        loop.close()
    assert response.diffs == diffs and response.changes is bool(diffs), response.diffs
