"""``Pulumi.yaml``'s ``config:`` block, generated from the key table (``infra/config/keys*.py``).

    .venv/bin/python -m tools.project_config           # rewrite Pulumi.yaml's config block
    .venv/bin/python -m tools.project_config --check   # exit 1 when it is stale

The Pulumi CLI reads each key's type and default from ``Pulumi.yaml`` (and applies the
defaults); the program reads the same keys by the table. Everything from the first comment or
``config:`` line on is generated; the project's name, description and runtime above it are
kept as written.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from infra.config import DISABLE_DEFAULT_PROVIDERS, DISABLED_PROVIDERS, KEYS, SECRET_KEYS, Key
from tools.generated import write_or_check

ROOT = Path(__file__).resolve().parent.parent
PROJECT_FILE = ROOT / "Pulumi.yaml"
_SECRETS = ", ".join(sorted(SECRET_KEYS, key=list(KEYS).index))
HEADER = f"""\
# The config block below is generated from infra/config/keys*.py by tools/project_config.py:
# do not edit it by hand; regenerate with `.venv/bin/python -m tools.project_config`.
# Every key of the project namespace (tf-distributed:<key>), with its type, default and meaning.
# The program refuses keys not declared here and values that break the rules in infra/config/.
# Secrets ({_SECRETS}) are declared as plain strings
# with an empty default, because a `secret: true` declaration cannot have a default; the program
# refuses a non-empty value that was not set with `pulumi config set --secret`.
config:
  # Every stack: only the explicit provider may talk to a cluster, never the shell's current
  # kube context (the program also refuses to run without this).
  {DISABLE_DEFAULT_PROVIDERS}:
    value:
"""


def scalar(value: Any) -> str:
    """``value`` as a YAML scalar: plain where that reads back as the same value, else
    double-quoted (JSON's escapes are YAML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(json.dumps(item) for item in value) + "]"
    text = str(value)
    try:
        plain = text != "" and text == text.strip() and yaml.safe_load(f"k: {text}") == {"k": text}
    except yaml.YAMLError:
        plain = False
    return text if plain else json.dumps(text, ensure_ascii=False)


def declaration(key: Key) -> list[str]:
    """The lines of one key's declaration."""
    lines = [f"  {key.name}:", f"    type: {key.kind.pulumi_type}"]
    if key.kind.items_type:
        lines += ["    items:", f"      type: {key.kind.items_type}"]
    lines += [f"    default: {scalar(key.default)}", f"    description: {scalar(key.description)}"]
    return lines


def config_block(keys: Iterable[Key]) -> str:
    """The generated part of ``Pulumi.yaml``: header comments and the ``config:`` block."""
    lines = [HEADER.rstrip("\n")]
    lines += [f"      - {provider}" for provider in DISABLED_PROVIDERS]
    group = None
    for key in keys:
        if key.group != group:
            lines.append(f"  # --- {key.group} ---")
            group = key.group
        lines += declaration(key)
    return "\n".join(lines) + "\n"


def project_file(current: str, keys: Iterable[Key] = KEYS.values()) -> str:
    """``current`` (``Pulumi.yaml``'s text) with its generated part made from ``keys``."""
    head: list[str] = []
    for line in current.splitlines(keepends=True):
        if line.startswith(("#", "config:")):
            break
        head.append(line)
    return "".join(head) + config_block(keys)


def main(argv: Sequence[str] | None = None) -> int:
    return write_or_check(
        argv,
        prog="project_config.py",
        description=__doc__.split("\n")[0],
        path=PROJECT_FILE,
        expected=project_file,
        stale="Pulumi.yaml's config block is stale against the key table: run "
        ".venv/bin/python -m tools.project_config",
        wrote="wrote Pulumi.yaml",
    )


if __name__ == "__main__":
    sys.exit(main())
