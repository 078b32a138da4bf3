"""Every key of the stack configuration, once: its name, group, kind (type and rule), default
and description.

This table is the one definition of a key. ``Pulumi.yaml``'s ``config:`` block
(``tools/project_config.py``) and ``docs/config-reference.md`` (``tools/config_reference.py``)
are generated from it, and :func:`infra.config.reading.read_keys` reads the stack's values by
it. Where the trainer applies the same rule or default (a flag the stack sets, a port, the run
id), the key takes it from :mod:`trainer.contract` instead of writing it again. A
description's ``{range}`` is the kind's bounds (``1-1000``), so they are not written twice.

The rules between keys (``cpuLimit >= cpuRequest``, ``nccl`` needs GPUs) are in
:mod:`infra.config.checks`; the image settings' rules, shared with ``infra/image.py``, in
:mod:`infra.config.image`.

Why a table of plain dataclasses and not pydantic or attrs: the Pulumi CLI hands the program
flat text (``"2"``, JSON for arrays), every problem must be one line in this project's words
(``<key>: <rule>; got <value>``), several per key and all at once, and the rules between keys
must still judge values that broke their own rule. A validation library would need a custom
validator and a translated message for nearly every key; the kinds of :mod:`infra.config.kinds`
are those validators, without the translation.

The table itself is in two modules by what the keys configure (:mod:`infra.config.keys_cluster`:
names and cluster, workers, checkpoint storage; :mod:`infra.config.keys_run`: the run, the
trainer's flags, autoscaling, monitoring, the image), :class:`~infra.config.key.Key` and what
both share in :mod:`infra.config.key`; here they become one mapping, in ``Pulumi.yaml``'s order.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from infra.config import keys_cluster, keys_run
from infra.config.key import Key

KEYS: dict[str, Key] = {
    key.name: replace(key, group=group)
    for group, keys in (keys_cluster.GROUPS | keys_run.GROUPS).items()
    for key in keys
}
"""Every key by name, in ``Pulumi.yaml``'s order."""

SECRET_KEYS = frozenset(name for name, key in KEYS.items() if key.secret)
"""Keys whose non-empty value must have been set with ``pulumi config set --secret``."""


def default_of(name: str) -> Any:
    """The default of key ``name`` (for the typed model's and the components' defaults)."""
    return KEYS[name].default
