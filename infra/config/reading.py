"""One pass over the key table: every key's value read by its kind, every problem collected.

Besides each key's own rule, this pass refuses what the mapping as a whole gets wrong: a
project key not in the table (with the declared key it most likely meant), a secret set in
plain text, and a stack that leaves the default Kubernetes provider enabled.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import pulumi

from infra.config.errors import PROJECT, problem
from infra.config.keys import KEYS
from trainer.contract import did_you_mean

DISABLE_DEFAULT_PROVIDERS = "pulumi:disable-default-providers"
DISABLED_PROVIDERS = ("kubernetes",)
"""What ``Pulumi.yaml`` sets ``pulumi:disable-default-providers`` to for every stack: only the
explicit provider may talk to a cluster, never the shell's current kube context."""
RENAMED_KEYS = {
    "autoscalingCpuUtilization": "autoscalingCpuLimitUtilization (percent of cpuLimit, not of "
    "cpuRequest)",
    "autoscalingScaleDownWindowSeconds": "nothing: the HPA never scales a training run down "
    "(autoscalingScaleUpWindowSeconds paces scale-up)",
}
"""Keys earlier versions declared: the unknown-key error says what replaced them."""


@dataclass(frozen=True)
class Reading:
    """The values read, by short key.

    Attributes:
        values: each key's typed value; ``None`` where it has none (missing, or not of the
            key's type). A value that broke its rule is still here, for the rules between keys.
            A secret key's value is its ``pulumi.Output`` (``None``: empty or not secret).
        secrets_set: the secret keys with a non-empty value (secret or not).
        problems: every problem found, one line each.
    """

    values: dict[str, Any]
    secrets_set: frozenset[str]
    problems: list[str]


def read_keys(
    raw: Mapping[str, Any],
    secret_keys: Collection[str] = (),
    secrets: Mapping[str, pulumi.Output[str]] | None = None,
) -> Reading:
    """Read every key of :data:`~infra.config.keys.KEYS` out of ``raw`` (fully qualified keys
    to the values the Pulumi runtime gives); see :func:`infra.config.parse_config`."""
    values: dict[str, Any] = {}
    secrets_set: set[str] = set()
    problems: list[str] = []
    for name, key in KEYS.items():
        full = f"{PROJECT}:{name}"
        if full not in raw:
            problems.append(
                f"{full}: required (declared in Pulumi.yaml; the Pulumi CLI >= 3.44 applies "
                "its default); got no value"
            )
            values[name] = None
            continue
        if key.secret:
            values[name] = None
            if raw[full] in ("", None):
                continue
            secrets_set.add(name)
            if full not in secret_keys:
                # Never echo the value: it was meant to be secret.
                problems.append(
                    f"{full}: must be set with 'pulumi config set --secret {name}' "
                    "(encrypted in the stack file); got a plaintext value"
                )
            else:
                values[name] = (secrets or {}).get(name)
            continue
        values[name], broken = key.kind.read(raw[full])
        hidden = full in secret_keys
        problems += [problem(name, rule, SECRET_SHOWN if hidden else v) for rule, v in broken]
    problems += _provider_problems(raw) + _unknown_keys(raw, secret_keys)
    return Reading(values, frozenset(secrets_set), problems)


class _Hidden:
    """Stands in an error line for a value that was set as a secret."""

    def __repr__(self) -> str:
        return "a value set as a secret (not shown)"


SECRET_SHOWN = _Hidden()


def hide_secrets(line: str, raw: Mapping[str, Any], secret_keys: Collection[str]) -> str:
    """``line`` with every value set as a secret (whatever its key) replaced by
    a mark: as given, and as ``repr`` writes it inside quotes (a multi-line
    kubeconfig shows its newlines escaped)."""
    for full in secret_keys:
        value = raw.get(full)
        if not isinstance(value, str) or len(value) < 4:
            continue  # empty or too short to mask without blanking unrelated text
        for text in (value, repr(value)[1:-1]):
            line = line.replace(text, "(secret, not shown)")
    return line


def _provider_problems(raw: Mapping[str, Any]) -> list[str]:
    """Default providers: nothing may land on whatever cluster the shell points at."""
    disabled = raw.get(DISABLE_DEFAULT_PROVIDERS)
    try:
        disabled_list = json.loads(disabled) if isinstance(disabled, str) else disabled
    except ValueError:
        disabled_list = None
    if isinstance(disabled_list, list) and ("kubernetes" in disabled_list or "*" in disabled_list):
        return []
    return [
        f"{DISABLE_DEFAULT_PROVIDERS}: must list 'kubernetes' (or '*') in the stack file; "
        f"got {disabled!r}"
    ]


def _unknown_keys(raw: Mapping[str, Any], secret_keys: Collection[str]) -> list[str]:
    """A project key the table does not declare, with what replaced it or what it likely
    meant (a typo of a declared key: ``replica``, ``epoch``)."""
    out = []
    for full_key in sorted(raw):
        namespace, _, name = full_key.partition(":")
        if namespace != PROJECT or name in KEYS:
            continue
        if name in RENAMED_KEYS:
            hint = f"; replaced by {RENAMED_KEYS[name]}"
        else:
            near = did_you_mean(name, KEYS)
            hint = f"; did you mean {PROJECT}:{near}?" if near else ""
        shown = SECRET_SHOWN if full_key in secret_keys else raw[full_key]
        out.append(f"{full_key}: unknown key (not declared in Pulumi.yaml{hint}); got {shown!r}")
    return out
