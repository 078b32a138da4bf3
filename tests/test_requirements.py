"""What users install is what was released: every pin in the files they install is an exact,
final release (no pre-release, development or local version)."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
INSTALLED_FILES = sorted(
    [
        *ROOT.glob("requirements*.txt"),
        *ROOT.glob("requirements/*.txt"),
        ROOT / "policy" / "requirements.txt",
    ]
)


def pins(path: Path) -> list[Requirement]:
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            out.append(Requirement(line))
    return out


def unreleased(text: str) -> str | None:
    """Why a pin line is not an exact final release, or None when it is."""
    req = Requirement(text)
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==":
        return f"{req.name}: pin an exact version with ==, got {str(req.specifier)!r}"
    version = Version(specs[0].version)
    if version.is_prerelease or version.is_devrelease:
        return f"{req.name}=={version}: a pre-release, not a released version"
    if version.local:
        return f"{req.name}=={version}: a local version, not a released version"
    return None


@pytest.mark.parametrize(
    ("line", "verdict"),
    [
        ("pulumi-kubernetes==4.34.2", None),
        ("pulumi-kubernetes==4.25.0a1768448096", "pre-release"),
        ("tensorflow==2.21.0rc1", "pre-release"),
        ("pulumi==3.272.0.dev5", "pre-release"),
        ("ruff==0.17.6+local", "local version"),
        ("PyYAML>=6", "pin an exact version"),
    ],
)
def test_the_pin_rule(line: str, verdict: str | None) -> None:
    found = unreleased(line)
    if verdict is None:
        assert found is None, f"{line}: {found}"
    else:
        assert found is not None and verdict in found, f"{line}: {found!r}"


@pytest.mark.parametrize("path", INSTALLED_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_installed_pin_is_a_release(path: Path) -> None:
    found = pins(path)
    problems = [p for p in (unreleased(str(r)) for r in found) if p]
    assert not problems, f"{path.relative_to(ROOT)}: {problems}"


def test_the_installed_files_are_found() -> None:
    names = {str(p.relative_to(ROOT)) for p in INSTALLED_FILES}
    assert {"requirements.txt", "requirements/infra.txt", "policy/requirements.txt"} <= names
