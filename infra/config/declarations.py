"""``Pulumi.yaml``'s ``config:`` declarations as the Pulumi CLI reads them (for the offline
renderer, which applies their defaults as the CLI does), and a value as the CLI hands it on."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.config.errors import PROJECT
from infra.config.kinds import PROJECT_DIR

PROJECT_FILE = PROJECT_DIR / "Pulumi.yaml"


@dataclass(frozen=True)
class Declaration:
    """One ``config:`` entry of ``Pulumi.yaml``."""

    key: str
    type: str
    default: Any
    description: str
    items_type: str | None = None


def project_declarations(path: Path = PROJECT_FILE) -> dict[str, Declaration]:
    """The project-namespace config declarations of ``Pulumi.yaml``, by short key."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    out: dict[str, Declaration] = {}
    for key, spec in (doc.get("config") or {}).items():
        if ":" in key and not key.startswith(f"{PROJECT}:"):
            continue
        short = key.split(":", 1)[-1]
        out[short] = Declaration(
            key=short,
            type=spec["type"],
            default=spec.get("default"),
            description=spec.get("description", ""),
            items_type=(spec.get("items") or {}).get("type"),
        )
    return out


def to_config_text(value: Any) -> str:
    """A typed YAML value as the Pulumi CLI hands it to the program (arrays as JSON)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)
