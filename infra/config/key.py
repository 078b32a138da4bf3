"""A config key (:class:`Key`) and the kinds, values and rules the key tables share."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from infra.config.kinds import (
    TOLERATION_EFFECTS,
    Kind,
    Secret,
    Strings,
    Text,
    cidr,
)
from trainer.contract import (
    Interval,
    TrainerFlags,
)

NAMESPACE_MODES = ("create", "existing")
"""``namespaceMode``/``monitoringNamespaceMode``: ``create`` makes the namespace the stack's own
(labelled by it, deleted with it); ``existing`` deploys into a namespace the stack does not own
(no Namespace resource: its labels and its life are left to its owner)."""
RETENTION_POLICIES = ("Retain", "Delete")
ALERT_FOR_MINUTES = (0, 60)
"""Range of ``monitoringAlertForMinutes`` (the alert rules' ``for``, in minutes); the rules'
own check (``infra.alerts.AlertThresholds``) uses it too."""
PORTS = Interval(1024, 65535)
"""Container ports: non-root cannot bind below 1024."""
FLAGS = TrainerFlags()
"""The trainer's flag defaults: the defaults of the keys that set those flags."""

RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")
TOKEN = re.compile(r"^[A-Za-z0-9_.:/*?\[\]-]+$")
CHECKPOINT_URI = re.compile(r"^[a-z][a-z0-9+.-]*://[^ ]+\Z")
"""A URI of any scheme: which schemes the trainer has is ``contract.storage_problem``'s rule."""
CHECKPOINT_URI_RULE = "must be empty or a gs://bucket/path URI"
CHART_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
CHART_REPOSITORY = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
TOLERATION_RULE = (
    f"each entry must be 'key[=value]:Effect' with Effect one of {', '.join(TOLERATION_EFFECTS)}"
)
IMAGE_TEXT = Text(empty=True)
"""The image settings read as text; their rules are :func:`infra.config.image.image_problems`
(shared with ``infra/image.py``, and dependent on ``imageReference`` and ``clusterKind``)."""


def cidr_port(text: str) -> tuple[str, int]:
    """``CIDR:port`` (``169.254.169.254/32:80``) as the CIDR and the TCP port."""
    block, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(text)
    return cidr(block), int(port)


def cidrs(example: str) -> Strings:
    """An array of CIDRs (host bits zero), e.g. ``example``."""
    return Strings(cidr, f"each entry must be a CIDR such as {example!r}")


@dataclass(frozen=True)
class Key:
    """One config key ``tf-distributed:<name>``.

    Attributes:
        name: the key without its namespace.
        kind: its Pulumi type and rule (:mod:`infra.config.kinds`).
        default: what the Pulumi CLI applies when a stack does not set it.
        about: its description; ``{range}`` stands for the kind's bounds.
        group: the section of ``Pulumi.yaml`` and of the reference it belongs to.
        flag: the trainer flag the key sets (its ``TrainerFlags`` field); ``""``: none. The
            pod's ``args`` carry it from the key's value (``infra.pod``), and ``trainerFlags``
            refuses it: declaring it here is all a key needs to reach the trainer.
    """

    name: str
    kind: Kind
    default: Any
    about: str
    group: str = ""
    flag: str = ""

    @property
    def description(self) -> str:
        if "{range}" not in self.about:
            return self.about
        return self.about.replace("{range}", self.kind.range)

    @property
    def secret(self) -> bool:
        return isinstance(self.kind, Secret)
