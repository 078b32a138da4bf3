"""What a config key holds: its Pulumi type, and how its value is read and judged.

The Pulumi CLI hands the program flat values (``"2"``, ``"true"``, JSON text for arrays); each
kind here turns one into a typed value and lists the rules it breaks, as ``(rule, shown)``
pairs that :func:`infra.config.reading.read_keys` writes as ``<key>: <rule>; got <shown>``.

A value of the right type that breaks its rule is still returned (``replicas: 0`` reads as
``0``), so the rules between keys (:mod:`infra.config.checks`) can still judge it; ``None``
means no typed value (``"two"`` for an integer), and the rules that need it are skipped.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from infra.config.quantities import parse_quantity
from trainer.contract import DNS_LABEL, DNS_SUBDOMAIN, Interval, TrainerFlags

PROJECT_DIR = Path(__file__).resolve().parents[2]
"""The project directory (``Pulumi.yaml``'s); ``monitoringValuesFile`` is relative to it."""

Broken = list[tuple[str, Any]]
"""The rules a value breaks: ``(rule, value shown)`` each."""

SYSTEM_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")
"""Namespaces every cluster has and needs; refused as the training or monitoring namespace (the
stack would label them, put a default-deny NetworkPolicy on their pods and own their fate)."""
SYSTEM_NAMESPACE_RULE = (
    f"must not be a Kubernetes system namespace ({', '.join(SYSTEM_NAMESPACES)})"
)
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# Kubernetes label key: optional DNS-subdomain prefix + "/" + name of [A-Za-z0-9._-] (<= 63).
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_EXAMPLES = {"CPU": "'500m' or '2'", "memory": "'512Mi' or '4Gi'", "storage": "'10Gi'"}
_BOUNDS = {
    # Below a millicore Kubernetes rounds a CPU quantity up; past 1024 cores no node has it and
    # the autoscaler's utilisation target (percent of the limit, an int32) overflows.
    "CPU": ("1m", Decimal("0.001"), "1024", Decimal(1024)),
    "memory": ("1Mi", Decimal(2**20), "64Ti", Decimal(64 * 2**40)),
    "storage": ("1Mi", Decimal(2**20), "1Pi", Decimal(2**50)),
}
"""Each quantity's range (as written, as a value): what a node or a volume can give."""


class Read(NamedTuple):
    """A value read: typed (``None``: no typed value) and the rules it breaks."""

    value: Any
    broken: Broken


class Amount(NamedTuple):
    """A Kubernetes quantity as written (``500m``) and its value (``0.5``)."""

    text: str
    value: Decimal


@dataclass(frozen=True)
class Toleration:
    """A pod toleration from ``key[=value]:Effect`` (no value: ``operator: Exists``)."""

    key: str
    value: str | None
    effect: str

    def manifest(self) -> dict[str, str]:
        out = {"key": self.key, "operator": "Exists" if self.value is None else "Equal"}
        if self.value is not None:
            out["value"] = self.value
        out["effect"] = self.effect
        return out


@dataclass(frozen=True)
class Text:
    """A string: non-empty unless ``empty``; matching ``pattern`` (``rule`` says how) and at
    most ``longest`` characters (``long_rule`` says why)."""

    pattern: re.Pattern[str] | None = None
    rule: str = ""
    empty: bool = False
    longest: int | None = None
    long_rule: str = ""
    pulumi_type = "string"
    items_type = None

    def read(self, value: Any) -> Read:
        text = str(value)
        if text == "" and self.empty:
            return Read("", [])
        broken: Broken = []
        if text == "" or (self.pattern is not None and not self.pattern.match(text)):
            broken.append((self.rule or "must be a non-empty string", value))
        if self.longest is not None and len(text) > self.longest:
            broken.append((self.long_rule, text))
        return Read(text, broken)


def dns_label(
    longest: int = 63,
    long_rule: str = "must be at most 63 characters",
    *,
    why: str = "",
    empty: bool = False,
) -> Text:
    """A lowercase RFC 1123 label (namespace and object names); ``why`` says what it names,
    ``empty`` allows ``""`` (an optional name)."""
    rule = "must be a lowercase DNS label" + (
        f" ({why})" if why else " (<= 63)" if longest == 63 else ""
    )
    return Text(DNS_LABEL, rule, empty=empty, longest=longest, long_rule=long_rule)


@dataclass(frozen=True)
class Namespace:
    """A namespace name: a DNS label, never a system namespace unless ``allow_system`` (then
    that rule is a cross-field one: ``monitoringNamespace`` names nothing while monitoring is
    off)."""

    allow_system: bool = False
    pulumi_type = "string"
    items_type = None

    def read(self, value: Any) -> Read:
        text, broken = dns_label().read(value)
        if not self.allow_system and text in SYSTEM_NAMESPACES:
            broken.append((SYSTEM_NAMESPACE_RULE, text))
        return Read(text, broken)


@dataclass(frozen=True)
class Choice:
    """One of ``choices``."""

    choices: tuple[str, ...]
    pulumi_type = "string"
    items_type = None

    def read(self, value: Any) -> Read:
        if value not in self.choices:
            return Read(str(value), [(f"must be one of {', '.join(self.choices)}", value)])
        return Read(str(value), [])


@dataclass(frozen=True)
class Whole:
    """A whole number within ``interval`` (a :mod:`trainer.contract` rule where the trainer
    applies it too; ``Pulumi.yaml`` declares the numeric keys as integers)."""

    interval: Interval
    pulumi_type = "integer"
    items_type = None

    @property
    def range(self) -> str:
        """The bounds as a description writes them: ``1-1000``, ``0-86399``, ``>= 1``."""
        rule = self.interval
        lo = int(rule.lo) + (1 if rule.lo_open else 0)
        if rule.hi is None:
            return f">= {lo}"
        return f"{lo}-{int(rule.hi) - (1 if rule.hi_open else 0)}"

    def read(self, value: Any) -> Read:
        rule = self.interval.whole()
        try:
            number = int(str(value).strip())
        except ValueError:
            return Read(None, [(f"must be {rule.text}", value)])
        return Read(number, [] if rule.contains(number) else [(f"must be {rule.text}", value)])


@dataclass(frozen=True)
class Boolean:
    """``true`` or ``false``."""

    pulumi_type = "boolean"
    items_type = None

    def read(self, value: Any) -> Read:
        if isinstance(value, bool):
            return Read(value, [])
        if value in ("true", "false"):
            return Read(value == "true", [])
        return Read(None, [("must be a boolean (true or false)", value)])


def _array(value: Any) -> Any:
    """The items of an array; ``None`` when the value is no JSON array (the CLI hands arrays to
    the program as JSON text; tests may pass lists)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value) if value.strip() else []
    except ValueError:
        return None


_STRINGS_RULE = "must be an array of strings (JSON when given as text)"


def _strings(value: Any) -> list[str] | None:
    """The items of an array of strings; ``None`` when the value is no such array."""
    items = _array(value)
    ok = isinstance(items, list) and all(isinstance(i, str) for i in items)
    return items if ok else None


@dataclass(frozen=True)
class Strings:
    """An array of strings, each read by ``item`` (a ``ValueError`` breaks ``item_rule``)."""

    item: Callable[[str], Any] | None = None
    item_rule: str = ""
    pulumi_type = "array"
    items_type = "string"

    def read(self, value: Any) -> Read:
        items = _strings(value)
        if items is None:
            return Read(None, [(_STRINGS_RULE, value)])
        if self.item is None:
            return Read(tuple(items), [])
        out, broken = [], []
        for entry in items:
            try:
                out.append(self.item(entry))
            except ValueError:
                broken.append((self.item_rule, entry))
        return Read(None if broken else tuple(out), broken)


@dataclass(frozen=True)
class TrainerFlagList:
    """Flags of ``python -m trainer`` that have no stack key of their own, as ``flag=value``
    entries (``--`` optional; a boolean flag alone). They are read by the trainer's own parser
    (:meth:`trainer.contract.TrainerFlags.from_argv`), so each flag's rule and message are the
    trainer's; a flag that has its own key (``owned()``: flag field -> key) is refused, naming
    it. ``owned`` is called when a value is read: the keys that own flags are declared beside
    this one.
    """

    owned: Callable[[], Mapping[str, str]]
    pulumi_type = "array"
    items_type = "string"

    def read(self, value: Any) -> Read:
        items = _strings(value)
        if items is None:
            return Read(None, [(_STRINGS_RULE, value)])
        argv, named, broken = [], [], []
        for entry in items:
            flag = entry.strip() if entry.strip().startswith("--") else f"--{entry.strip()}"
            field = flag.partition("=")[0][2:].replace("-", "_")
            owned = self.owned()
            if field in owned:
                broken.append((f"{flag.partition('=')[0]} is set by the key {owned[field]}",
                               entry))  # fmt: skip
            argv.append(flag)
            named.append(field)
        if broken:
            return Read(None, broken)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                flags = TrainerFlags.from_argv(argv, prog="trainerFlags")
        except SystemExit:
            why = (err.getvalue().strip().splitlines() or ["invalid"])[-1].split("error: ", 1)[-1]
            return Read(None, [(f"must be flags of python -m trainer ({why})", items)])
        # The parsed values of the flags given (field -> value), in their order, once.
        return Read(tuple((f, getattr(flags, f)) for f in dict.fromkeys(named)), [])


@dataclass(frozen=True)
class Integers:
    """An array of integers in ``[lo, hi]``."""

    lo: int
    hi: int
    pulumi_type = "array"
    items_type = "integer"

    def read(self, value: Any) -> Read:
        items = _array(value)
        ok = isinstance(items, list) and all(
            isinstance(i, int) and not isinstance(i, bool) and self.lo <= i <= self.hi
            for i in items
        )
        if not ok:
            return Read(None, [(f"must be an array of integers in [{self.lo}, {self.hi}]", value)])
        return Read(tuple(items), [])


@dataclass(frozen=True)
class Quantity:
    """A positive Kubernetes quantity of ``what`` (``CPU``, ``memory``, ``storage``), read as
    an :class:`Amount`; ``whole``: a whole number (of bytes)."""

    what: str
    whole: bool = False
    pulumi_type = "string"
    items_type = None

    def read(self, value: Any) -> Read:
        text, broken = Text().read(value)
        try:
            amount = parse_quantity(text)
        except ValueError:
            example = _EXAMPLES[self.what]
            rule = f"must be a Kubernetes quantity of {self.what} (e.g. {example})"
            return Read(None, [*broken, (rule, text)])
        if amount <= 0:
            return Read(None, [*broken, (f"must be a positive quantity of {self.what}", text)])
        if self.whole and amount != amount.to_integral_value():
            return Read(None, [("must be a whole number of bytes (e.g. '10Gi')", text)])
        least_text, least, most_text, most = _BOUNDS[self.what]
        if not least <= amount <= most:
            rule = f"must be a quantity of {self.what} from {least_text} to {most_text}"
            return Read(None, [*broken, (rule, text)])
        return Read(Amount(text, amount), broken)


@dataclass(frozen=True)
class ValuesFile:
    """The chart values of the YAML file named (relative to the project directory); empty
    when the name is. The file must hold a mapping."""

    pulumi_type = "string"
    items_type = None

    def read(self, value: Any) -> Read:
        name = str(value)
        if not name:
            return Read({}, [])
        try:
            values = yaml.safe_load((PROJECT_DIR / name).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as err:
            reason = err.strerror if isinstance(err, OSError) else "not valid YAML"
            return Read(
                None, [(f"must name a readable YAML file of chart values ({reason})", name)]
            )
        if not isinstance(values, dict):
            return Read(None, [("must name a YAML file holding a mapping of chart values", name)])
        return Read(values, [])


@dataclass(frozen=True)
class Secret:
    """A secret string: set with ``pulumi config set --secret``, read as ``pulumi.Output`` by
    :func:`infra.config.reading.read_keys` (the value itself is never shown)."""

    pulumi_type = "string"
    items_type = None

    def read(self, value: Any) -> Read:
        return Read(str(value), [])


Kind = (
    Text
    | Namespace
    | Choice
    | Whole
    | Boolean
    | Strings
    | Integers
    | Quantity
    | ValuesFile
    | Secret
)


# --- Items of the array keys. ---


def cidr(text: str) -> str:
    """A CIDR with its prefix length and its host bits zero (a NetworkPolicy's ipBlock needs
    both). Raises ``ValueError`` otherwise."""
    if "/" not in text:
        raise ValueError(text)
    ipaddress.ip_network(text, strict=True)
    return text


def label_key_ok(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(name) and bool(_LABEL_NAME.match(name))


def node_label(text: str) -> tuple[str, str | None]:
    """``key=value``, a node label, or ``key`` alone: the label is present, any value
    (``None``; a cloud's accelerator label names the GPU model). Raises ``ValueError``
    otherwise."""
    k, eq, v = text.partition("=")
    if not label_key_ok(k) or (eq and not _LABEL_VALUE.match(v)):
        raise ValueError(text)
    return k, (v if eq else None)


def toleration(text: str) -> Toleration:
    """``key[=value]:Effect``. Raises ``ValueError`` otherwise."""
    head, sep, effect = text.rpartition(":")
    name, eq, value = head.partition("=")
    if (
        not sep
        or effect not in TOLERATION_EFFECTS
        or not label_key_ok(name)
        or (eq and not _LABEL_VALUE.match(value))
    ):
        raise ValueError(text)
    return Toleration(key=name, value=value if eq else None, effect=effect)
