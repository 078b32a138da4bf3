"""``submit``'s settings: the stack's config plus the requested changes, checked by the
program's own rules (``infra.config.parse_config``) before anything changes.

The mapping handed to ``parse_config`` is built the way the CLI hands config to the program:
``Pulumi.yaml``'s defaults and its values for other namespaces, then the stack's config, then
the changes; every value a string, arrays as JSON text.
"""

from __future__ import annotations

import json
import os
import secrets as random
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from infra.config import (
    PROJECT,
    SECRET_KEYS,
    ConfigError,
    StackConfig,
    parse_config,
    project_declarations,
    to_config_text,
)
from tfd.errors import UsageError


def new_run_id(now: datetime | None = None) -> str:
    """A fresh run id: the UTC time and 4 random hex digits (``20261203-120501-a1b2``), within
    ``contract.RUN_ID`` (a directory name and a label value)."""
    when = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return f"{when}-{random.token_hex(2)}"


def full_key(key: str) -> str:
    return key if ":" in key else f"{PROJECT}:{key}"


def parse_sets(items: Iterable[str]) -> dict[str, str | list[str]]:
    """``--set key=value`` pairs as fully qualified keys. A value that is a JSON array sets an
    array key (``--set 'gpuTolerations=["nvidia.com/gpu=present:NoSchedule"]'``).

    Raises:
        UsageError: no ``=``, or a secret key (those are set with ``pulumi config set
            --secret``, never on a command line that shells keep in their history).
    """
    out: dict[str, str | list[str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set: must be key=value; got {item!r}")
        key = full_key(key.strip())
        if key.split(":", 1)[1] in SECRET_KEYS:
            short = key.split(":", 1)[1]
            raise UsageError(
                f"--set {key}: a secret: set it with pulumi config set --secret {short}"
            )
        parsed: Any = None
        if value.startswith("["):
            try:
                parsed = json.loads(value)
            except ValueError:
                raise UsageError(f"--set {key}: an array must be JSON; got {value!r}") from None
        out[key] = [str(v) for v in parsed] if isinstance(parsed, list) else value
    return out


def project_values(project_dir: Path) -> dict[str, str]:
    """What ``Pulumi.yaml`` gives every stack: the declared defaults and the values of other
    namespaces (``pulumi:disable-default-providers``), as config text."""
    out = {
        f"{PROJECT}:{d.key}": to_config_text(d.default)
        for d in project_declarations(project_dir / "Pulumi.yaml").values()
        if d.default is not None
    }
    doc = yaml.safe_load((project_dir / "Pulumi.yaml").read_text(encoding="utf-8")) or {}
    for key, spec in (doc.get("config") or {}).items():
        if ":" in key and not key.startswith(f"{PROJECT}:"):
            value = spec["value"] if isinstance(spec, dict) and "value" in spec else spec
            out[key] = to_config_text(value)
    return out


def merged(
    defaults: Mapping[str, str], current: Mapping[str, Any], changes: Mapping[str, str | list[str]]
) -> tuple[dict[str, str], set[str]]:
    """The flat config after the changes, and its secret keys. ``current``: the stack's
    ``ConfigValue``s (``value``, ``secret``)."""
    raw = dict(defaults)
    secret_keys: set[str] = set()
    for key, entry in current.items():
        raw[key] = str(entry.value)
        if entry.secret:
            secret_keys.add(key)
    for key, value in changes.items():
        raw[key] = json.dumps(value) if isinstance(value, list) else value
    return raw, secret_keys


def validate(
    raw: Mapping[str, str],
    secret_keys: Iterable[str],
    *,
    stack: str,
    environ: Mapping[str, str] | None = None,
    building: bool = True,
) -> StackConfig:
    """The program's verdict on the merged config; ``building=False`` for a command that only
    reads the stack (its image's rules, a Docker daemon among them, do not apply).

    Raises:
        UsageError: every problem ``parse_config`` finds, one line each (key, rule, value).
    """
    try:
        # The secret values stay out of this process's Pulumi objects: only whether each is
        # set (and set as a secret) matters to the rules.
        return parse_config(
            raw,
            set(secret_keys),
            {},
            environ if environ is not None else os.environ,
            project=PROJECT,
            stack=stack,
            building=building,
        )
    except ConfigError as err:
        raise UsageError("\n".join(err.problems)) from None
