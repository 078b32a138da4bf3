"""The stack's configuration read from the Pulumi runtime: the only module here that asks the
engine for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi

from infra.config.errors import PROJECT
from infra.config.keys import SECRET_KEYS
from infra.config.model import StackConfig
from infra.config.parse import parse_config


def _runtime_config() -> tuple[dict[str, Any], set[str]]:
    """Every config key the engine gave this program, and which of them are secret.

    The program's one private Pulumi SDK use (the renderer's are in ``tools/pulumi_private.py``):
    ``pulumi.runtime.config.CONFIG``, the whole config mapping. The unknown-key check needs every
    key, and ``pulumi.Config`` reads only keys it is given by name; the public
    ``pulumi.runtime.get_config_env`` lists ``PULUMI_CONFIG``, which the CLI's language host
    sets, but Automation API inline programs (the e2e suite) and mocks (the renderer) receive
    their config through ``set_all_config`` only, which nothing public lists.
    """
    from pulumi.runtime.config import CONFIG  # private; see above

    values: dict[str, Any] = dict(pulumi.runtime.get_config_env())
    values.update(CONFIG.get())
    secret = set(pulumi.runtime.get_config_secret_keys_env())
    secret.update(k for k in values if pulumi.runtime.is_config_secret(k))
    return values, secret


def load_config(
    reader: Callable[[], tuple[dict[str, Any], set[str]]] = _runtime_config,
) -> StackConfig:
    """Read and validate this stack's configuration from the Pulumi runtime.

    Raises:
        ConfigError: see :func:`parse_config`.
    """
    raw, secret_keys = reader()
    cfg = pulumi.Config(PROJECT)
    secrets = {
        key: cfg.get_secret(key)
        for key in SECRET_KEYS
        if raw.get(f"{PROJECT}:{key}") not in ("", None)
    }
    return parse_config(raw, secret_keys, {k: v for k, v in secrets.items() if v is not None})
