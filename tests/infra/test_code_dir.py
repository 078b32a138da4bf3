"""What of codeDirectory would reach the pushed image (infra.config.code_dir), and the
codeDirectory rules built on it (infra.config.image.code_directory_problems)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.config.code_dir import ignore_rules, ignored, shipped_credentials
from infra.config.image import code_directory_problems

# (.dockerignore text or None, files of the directory, what would be shipped)
SHIPPED = [
    (None, ["model.py", "data/x.npz"], []),
    (None, ["model.py", ".env", ".git/config", "keys/tls.key"], [".env", ".git", "keys/tls.key"]),
    (".git\n.env*\n*.key\n", ["model.py", ".env.local", ".git/HEAD", "tls.key"], []),
    # '*' stays in its segment: a key one level down is still copied
    ("*.key\n", ["sub/tls.key"], ["sub/tls.key"]),
    ("**/*.key\n", ["sub/deep/tls.key"], []),
    # a re-include after the exclusion wins
    ("*.pem\n!ca.pem\n", ["ca.pem", "other.pem"], ["ca.pem"]),
    # an excluded directory excludes what it holds
    ("secrets\n", ["secrets/.aws/credentials", "secrets/id_rsa"], []),
    ("# comment\n\n/.kube\n", [".kube/config", "my_kubeconfig.yaml"], ["my_kubeconfig.yaml"]),
]


@pytest.mark.parametrize(("ignore", "files", "expected"), SHIPPED)
def test_credentials_the_dockerignore_lets_through(tmp_path: Path, ignore, files, expected):
    if ignore is not None:
        (tmp_path / ".dockerignore").write_text(ignore)
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    got = shipped_credentials(tmp_path)
    assert got == expected, f".dockerignore {ignore!r} over {files}: ships {got}"


@pytest.mark.parametrize(
    ("pattern", "path", "out"),
    [("*.pyc", "a.pyc", True), ("*.pyc", "d/a.pyc", False), ("**/*.pyc", "d/e/a.pyc", True),
     ("d", "d/e/f", True), ("d/*", "d/e", True), ("?.txt", "ab.txt", False)],
)  # fmt: skip
def test_dockerignore_patterns_match_as_docker_does(pattern, path, out):
    assert ignored(path, ignore_rules(pattern)) is out, f"{pattern!r} against {path!r}"


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "code").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    return project


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("../elsewhere", "must be inside the project directory"),
        ("code/../../elsewhere", "must be inside the project directory"),
        ("code", None),
    ],
)
def test_a_code_directory_outside_the_project_is_refused(tmp_path: Path, name, rule):
    problems = code_directory_problems(name, _project(tmp_path))
    if rule is None:
        assert problems == [], f"codeDirectory {name!r}: {problems}"
    else:
        assert len(problems) == 1 and rule in problems[0], f"codeDirectory {name!r}: {problems}"


def test_a_credential_in_the_code_directory_is_refused_with_the_file_named(tmp_path: Path):
    project = _project(tmp_path)
    (project / "code" / ".env").write_text("TOKEN=x")
    (problem,) = code_directory_problems("code/", project)
    assert problem.startswith("tf-distributed:codeDirectory: would copy .env into the pushed"), (
        problem
    )
    assert "code/.dockerignore" in problem and "\n" not in problem, problem
    (project / "code" / ".dockerignore").write_text(".env\n")
    assert code_directory_problems("code", project) == []
