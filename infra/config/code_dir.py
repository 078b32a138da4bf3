"""What of ``codeDirectory`` would go into the pushed image, checked before anything is built.

The directory is the code image's build context, so its own ``.dockerignore`` decides what is
copied. Without one, or with one that lets a credential through (``.env``, ``.git``, keys, cloud
and kube credentials), the image would carry it to a registry: both are refused with the files
named. The matching follows Docker's ``.dockerignore`` rules (patterns relative to the context
root, ``*`` within a path segment, ``**`` across segments, ``!`` re-includes, the last match
wins, a matched directory excludes what it holds).
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

DOCKERIGNORE = ".dockerignore"
SENSITIVE = (
    ".git", ".env", ".env.*", "*.pem", "*.key", "*.p12", "id_rsa*", "id_ecdsa*", "id_ed25519*",
    ".ssh", ".aws", ".azure", ".config/gcloud", ".docker", ".netrc", ".pypirc", ".npmrc",
    "credentials*.json", "*kubeconfig*", ".kube",
)  # fmt: skip
"""Names (basename globs, or a relative path) that hold credentials far more often than code."""
STARTER = ".git .env* *.pem *.key id_* .ssh .aws .kube __pycache__"
"""The starter exclusions the error message suggests."""


def _pattern(line: str) -> re.Pattern[str]:
    out = ""
    for part in re.split(r"(\*\*/?|\*|\?)", line.strip("/")):
        if part.startswith("**"):
            out += "(.*/)?" if part.endswith("/") else ".*"
        elif part == "*":
            out += "[^/]*"
        elif part == "?":
            out += "[^/]"
        else:
            out += re.escape(part)
    return re.compile(out + "(/.*)?$")  # a matched directory excludes what it holds


def ignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """``.dockerignore`` lines as (re-include, pattern), comments and blanks dropped."""
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        rules.append((include, _pattern(os.path.normpath(line.lstrip("!")))))
    return rules


def ignored(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether ``path`` (relative, ``/``-separated) is left out of the build context."""
    out = False
    for include, pattern in rules:
        if pattern.match(path):
            out = not include
    return out


def shipped_credentials(directory: Path) -> list[str]:
    """The credential-like files and directories of ``directory`` that its ``.dockerignore``
    would copy into the image (all of them when it has none), relative, sorted."""
    ignore = directory / DOCKERIGNORE
    rules = ignore_rules(ignore.read_text(encoding="utf-8")) if ignore.is_file() else []
    found: list[str] = []
    for root, dirs, files in os.walk(directory):
        rel_root = Path(root).relative_to(directory).as_posix()
        walk_on = []
        for name in sorted(dirs + files):
            rel = name if rel_root == "." else f"{rel_root}/{name}"
            if ignored(rel, rules):
                continue
            if any(fnmatch.fnmatch(name, s) or rel == s for s in SENSITIVE):
                found.append(rel)
            elif name in dirs:
                walk_on.append(name)
        dirs[:] = walk_on
    return sorted(found)
