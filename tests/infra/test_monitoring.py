"""The monitoring component: builders, alert semantics (promtool) and the resources under mocks.

promtool comes from Debian's ``prometheus`` package (``apt-get install -y prometheus``); the
promtool tests fail, not skip, without it.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes_validate
import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml
from google.protobuf.json_format import MessageToDict
from pulumi.runtime.mocks import MockMonitor, MockResourceArgs

from infra import alerts, monitoring
from infra.config import PROJECT, PROJECT_FILE, ConfigError
from infra.dashboards import trainer as dash
from tools.render import Recorder, render_stack
from trainer import contract

PASSWORD = "s3cret-Grafana-pw"
MIRROR = "http://127.0.0.1:8879/charts"
WORKERS = {"app.kubernetes.io/name": "tfd-worker", "app.kubernetes.io/instance": "test"}
COMMON = {"app.kubernetes.io/part-of": "tf-distributed", "app.kubernetes.io/managed-by": "pulumi"}
SECRET_SIG = "4dabf18193072939515e22adb298388d"
"""Key Pulumi's wire format uses to mark a secret value (``rpc._special_sig_key``)."""


def _args(**overrides: Any) -> monitoring.MonitoringArgs:
    base: dict[str, Any] = {
        "namespace": "monitoring",
        "chart_version": monitoring.DEFAULT_CHART_VERSION,
        "grafana_admin_password": None,
        "training_namespace": "training",
        "worker_selector": dict(WORKERS),
        "labels": dict(COMMON),
    }
    base.update(overrides)
    return monitoring.MonitoringArgs(**base)


# --- PromQL metric-name extraction (so "every metric is a contract metric" can fail). ---

_PROMQL_WORDS = {"and", "or", "unless", "offset", "bool"}


def metric_names(expr: str) -> set[str]:
    """Metric names referenced by a PromQL expression (no PromQL parser needed for ours)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    idents = re.findall(r"\b[A-Za-z_:][A-Za-z0-9_:]*\b(?!\s*\()", e)
    return {i for i in idents if i not in _PROMQL_WORDS}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("max by (namespace, job) (changes(foo_step[15m])) == 0", {"foo_step"}),
        ('a_total{x="y", z=~"$ns"} unless on (job) (max by (job) (b) == 1)', {"a_total", "b"}),
        ("time() - max by (job) (c_seconds > 0) > 3600", {"c_seconds"}),
        ("sum(rate(up[$__rate_interval]))", {"up"}),
        ("histogram_quantile(0.9, sum by (le) (rate(d_bucket[5m]))) > 60", {"d_bucket"}),
    ],
)
def test_metric_names_extracts_every_metric(expr: str, expected: set[str]) -> None:
    assert metric_names(expr) == expected, expr


# --- Alerts. ---


CONTRACT_SERIES = set(contract.METRIC_NAMES) | {
    f"{h}_{part}" for h in contract.HISTOGRAMS for part in ("bucket", "sum", "count")
}
"""Every series name the trainer exposes: the contract names plus each histogram's series."""


PROMETHEUS_SERIES = frozenset({"up"})
"""Series Prometheus writes itself for each scrape target (the rules may read them too)."""


def test_every_alert_uses_only_contract_metrics() -> None:
    for rule in alerts.alert_rules():
        names = metric_names(rule["expr"])
        assert names, f"alert {rule['alert']}: no metric in {rule['expr']!r}"
        unknown = names - CONTRACT_SERIES - PROMETHEUS_SERIES
        assert not unknown, f"alert {rule['alert']}: not in contract.METRIC_NAMES: {unknown}"


def test_alerts_cover_stall_checkpoint_restarts_resumes_world_size() -> None:
    used = {n for r in alerts.alert_rules() for n in metric_names(r["expr"])}
    required = {
        contract.METRIC_STEP,
        contract.METRIC_CHECKPOINT_TIMESTAMP,
        contract.METRIC_STEPS_TOTAL,
        contract.METRIC_RESUMES_TOTAL,
        contract.METRIC_WORLD_SIZE,
        contract.METRIC_COMPLETED,
    }
    assert required <= used, f"infra/alerts.py: alerts miss {required - used}"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("stall_minutes", 0, r"AlertThresholds\.stall_minutes: must be an integer in \[1, 1440\]"),
        ("checkpoint_max_age_minutes", 99999, r"checkpoint_max_age_minutes: .* got 99999"),
        ("restart_window_minutes", 1, r"restart_window_minutes: .*\[5, 1440\]; got 1"),
        ("max_restarts", -1, r"max_restarts: .* got -1"),
        ("for_minutes", "5", r"for_minutes: must be an integer .* got '5'"),
        ("max_resumes", True, r"max_resumes: .* got True"),
    ],
)
def test_alert_thresholds_reject_bad_values(key: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        alerts.AlertThresholds(**{key: value})


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: install it with `apt-get install -y prometheus`"
    return path


def _run_promtool(*argv: str) -> None:
    proc = subprocess.run(
        [_promtool(), *argv], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, f"promtool {' '.join(argv)}:\n{proc.stdout}\n{proc.stderr}"


def test_promtool_checks_rules_file(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(alerts.rules_yaml())
    _run_promtool("check", "rules", str(rules))


T = alerts.AlertThresholds(
    stall_minutes=10,
    checkpoint_max_age_minutes=30,
    restart_window_minutes=30,
    max_restarts=2,
    max_resumes=2,
    for_minutes=2,
    checkpoint_save_max_seconds=30,
)
NS, JOB = "training", "training/tfd-workers"
LBL = f'namespace="{NS}", job="{JOB}"'


def _series(metric: str, values: str, pod: int = 0) -> dict[str, str]:
    return {"series": f'{metric}{{{LBL}, pod="tfd-worker-{pod}"}}', "values": values}


def _fires(alert: str, at_min: int, severity: str) -> dict[str, Any]:
    labels = {"namespace": NS, "job": JOB, "severity": severity}
    return {"eval_time": f"{at_min}m", "alertname": alert, "exp_alerts": [{"exp_labels": labels}]}


def _silent(alert: str, at_min: int) -> dict[str, Any]:
    return {"eval_time": f"{at_min}m", "alertname": alert, "exp_alerts": []}


def _case(series: list[dict[str, str]], checks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"interval": "1m", "input_series": series, "alert_rule_test": checks}


def _bucket(histogram: str, le: str, values: str) -> dict[str, str]:
    return {
        "series": f'{histogram}_bucket{{{LBL}, pod="tfd-worker-0", le="{le}"}}',
        "values": values,
    }


SLOW_SAVES = [("10", "0x30"), ("60", "0+1x30"), ("+Inf", "0+1x30")]
FAST_SAVES = [("1", "0+1x30"), ("10", "0+1x30"), ("60", "0+1x30"), ("+Inf", "0+1x30")]


# Each case: input series (1 sample a minute from t=0) and when each alert must / must not fire.
# Hold times below are the thresholds of T plus its `for`, so changing T keeps them meaningful.
STALL_AT = T.stall_minutes + T.for_minutes + 2
AGE_AT = T.checkpoint_max_age_minutes + T.for_minutes + 2
PROMTOOL_CASES = {
    "stalled step fires": _case(
        [
            _series(contract.METRIC_STEP, "100x60"),
            _series(contract.METRIC_COMPLETED, "0x60"),
        ],
        [_fires(alerts.ALERT_STALLED, STALL_AT, "critical")],
    ),
    "advancing step is silent": _case(
        [_series(contract.METRIC_STEP, "0+10x60"), _series(contract.METRIC_COMPLETED, "0x60")],
        [_silent(alerts.ALERT_STALLED, STALL_AT)],
    ),
    "completed job is silent": _case(
        [
            _series(contract.METRIC_STEP, "100x60"),
            _series(contract.METRIC_COMPLETED, "1x60"),
            _series(contract.METRIC_CHECKPOINT_TIMESTAMP, "60x60"),
            _series(contract.METRIC_WORLD_SIZE, "2x60"),
        ],
        [
            _silent(alerts.ALERT_STALLED, STALL_AT),
            _silent(alerts.ALERT_CHECKPOINT_STALE, AGE_AT),
            _silent(alerts.ALERT_WORKERS_MISSING, 10),
        ],
    ),
    "old checkpoint fires, none yet is silent": _case(
        [
            _series(contract.METRIC_CHECKPOINT_TIMESTAMP, "60x60", pod=0),
            _series(contract.METRIC_COMPLETED, "0x60"),
        ],
        [
            _silent(alerts.ALERT_CHECKPOINT_STALE, T.checkpoint_max_age_minutes - 5),
            _fires(alerts.ALERT_CHECKPOINT_STALE, AGE_AT, "warning"),
        ],
    ),
    "no checkpoint yet is silent": _case(
        [
            _series(contract.METRIC_CHECKPOINT_TIMESTAMP, "0x60"),
            _series(contract.METRIC_COMPLETED, "0x60"),
        ],
        [_silent(alerts.ALERT_CHECKPOINT_STALE, AGE_AT)],
    ),
    "restarts and resumes fire": _case(
        [
            # Three process restarts: the per-process step counter drops back to 0 three times.
            _series(contract.METRIC_STEPS_TOTAL, "0+5x4 0+5x4 0+5x4 0+5x4"),
            _series(contract.METRIC_RESUMES_TOTAL, "0 0 1 1 2 2 3 3 4 4"),
        ],
        [
            _fires(alerts.ALERT_RESTARTS, 19, "warning"),
            _fires(alerts.ALERT_RESUMES, 9, "warning"),
        ],
    ),
    "single restart is silent": _case(
        [
            _series(contract.METRIC_STEPS_TOTAL, "0+5x9 0+5x9"),
            _series(contract.METRIC_RESUMES_TOTAL, "0x9 1x9"),
        ],
        [_silent(alerts.ALERT_RESTARTS, 19), _silent(alerts.ALERT_RESUMES, 19)],
    ),
    "missing worker fires": _case(
        [
            _series(contract.METRIC_WORLD_SIZE, "3x30", pod=0),
            _series(contract.METRIC_WORLD_SIZE, "3x30", pod=1),
            _series(contract.METRIC_COMPLETED, "0x30"),
        ],
        [_fires(alerts.ALERT_WORKERS_MISSING, T.for_minutes + 3, "critical")],
    ),
    "slow checkpoint saves fire": _case(
        # One save a minute, each in the (10, 60] s bucket: the 90th percentile is above 30 s.
        [_bucket(contract.METRIC_CHECKPOINT_SAVE_SECONDS, le, v) for le, v in SLOW_SAVES],
        [_fires(alerts.ALERT_CHECKPOINT_SLOW, T.for_minutes + 5, "warning")],
    ),
    "fast checkpoint saves are silent": _case(
        [_bucket(contract.METRIC_CHECKPOINT_SAVE_SECONDS, le, v) for le, v in FAST_SAVES],
        [_silent(alerts.ALERT_CHECKPOINT_SLOW, T.for_minutes + 5)],
    ),
    "full world is silent": _case(
        [
            _series(contract.METRIC_WORLD_SIZE, "2x30", pod=0),
            _series(contract.METRIC_WORLD_SIZE, "2x30", pod=1),
            _series("up", "1x30", pod=0),
            _series("up", "1x30", pod=1),
            _series(contract.METRIC_COMPLETED, "0x30"),
        ],
        [_silent(alerts.ALERT_WORKERS_MISSING, T.for_minutes + 3)],
    ),
    # A worker gone for good: the one left waits for it inside TensorFlow and its scrape fails
    # too, so no world size is reported at all; its failing scrape still counts.
    "workers that do not answer the scrape fire": _case(
        [
            _series(contract.METRIC_WORLD_SIZE, "2x5 stale", pod=0),
            _series(contract.METRIC_WORLD_SIZE, "2x5 stale", pod=1),
            _series("up", "1x5 0x25", pod=0),
            _series(contract.METRIC_COMPLETED, "0x5 stale"),
        ],
        [
            _silent(alerts.ALERT_WORKERS_MISSING, 5),
            _fires(alerts.ALERT_WORKERS_MISSING, 5 + T.for_minutes + 2, "critical"),
        ],
    ),
    "other scrape jobs are ignored": _case(
        [{"series": 'up{namespace="kube-system", job="kubelet"}', "values": "0x30"}],
        [_silent(alerts.ALERT_WORKERS_MISSING, T.for_minutes + 3)],
    ),
}


def test_promtool_alert_semantics(tmp_path: Path) -> None:
    # promtool compares annotations too; their templates are checked by `check rules` above,
    # so the unit test runs the same expressions without them.
    rules = copy.deepcopy(alerts.rules_file(T))
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": list(PROMTOOL_CASES.values()),
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    _run_promtool("test", "rules", str(tmp_path / "test.yaml"))


# --- Dashboard. ---


def _dashboard_exprs() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dash.dashboard()["panels"] for t in p["targets"]]


def test_dashboard_uses_only_contract_metrics() -> None:
    for title, expr in _dashboard_exprs():
        names = metric_names(expr)
        assert names, f"dashboard panel {title!r}: no metric in {expr!r}"
        unknown = names - CONTRACT_SERIES
        assert not unknown, f"dashboard panel {title!r}: not in contract.METRIC_NAMES: {unknown}"
    for var in dash.dashboard()["templating"]["list"]:
        if var["type"] == "query":
            found = re.fullmatch(r"label_values\((\w+), *(\w+)\)", var["query"]["query"])
            assert found, f"dashboard variable {var['name']}: unexpected query {var['query']}"
            assert found.group(1) in contract.METRIC_NAMES, f"dashboard variable {var['name']}"


def test_dashboard_shows_the_training_metrics() -> None:
    used = {n for _, expr in _dashboard_exprs() for n in metric_names(expr)}
    required = {
        contract.METRIC_STEP,
        contract.METRIC_EXAMPLES_PER_SECOND,
        contract.METRIC_LOSS,
        contract.METRIC_ACCURACY,
        contract.METRIC_WORLD_SIZE,
        contract.METRIC_CHECKPOINT_TIMESTAMP,
        contract.METRIC_RESUMES_TOTAL,
        contract.METRIC_COMPLETED,
        contract.METRIC_EXAMPLES_TOTAL,
        f"{contract.METRIC_STEP_SECONDS}_bucket",
        f"{contract.METRIC_CHECKPOINT_SAVE_SECONDS}_bucket",
        contract.METRIC_EVAL_LOSS,
        contract.METRIC_EVAL_ACCURACY,
    }
    assert required <= used, f"infra/dashboards/trainer.py: panels miss {required - used}"


def test_dashboard_layout_fits_grid_without_overlap() -> None:
    panels = dash.dashboard()["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"dashboard: duplicate panel ids {ids}"
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, f"dashboard panel {p['title']!r} exceeds 24 columns: {g}"
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, f"dashboard panel {p['title']!r} overlaps another: {g}"
        cells |= mine


SDK_CANNOT_MODEL = frozenset({"templating.list[].definition"})
"""Dashboard fields grafana-foundation-sdk (Grafana 10.1's models) does not model: it drops
them on load. ``definition`` is the query text Grafana shows for a query variable; the query
itself (``query.query``) is kept."""


def _json_diff(ours: Any, theirs: Any, path: str = "") -> tuple[set[str], list[str], set[str]]:
    """``(dropped, changed, added)`` field paths from ``ours`` to ``theirs``; list indexes
    are written ``[]`` so one entry covers every element."""
    dropped: set[str] = set()
    changed: list[str] = []
    added: set[str] = set()
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in ours.keys() | theirs.keys():
            sub = f"{path}.{key}".lstrip(".")
            if key not in theirs:
                dropped.add(sub)
            elif key not in ours:
                added.add(sub)
            else:
                d, c, a = _json_diff(ours[key], theirs[key], sub)
                dropped |= d
                changed += c
                added |= a
    elif isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        for mine, other in zip(ours, theirs, strict=True):
            d, c, a = _json_diff(mine, other, f"{path}[]")
            dropped |= d
            changed += c
            added |= a
    elif ours != theirs:
        changed.append(f"{path}: {ours!r} -> {theirs!r}")
    return dropped, changed, added


def test_dashboard_loads_in_grafana_foundation_sdk_dropping_only_listed_fields() -> None:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()  # the panel and query models (timeseries, stat, prometheus)
    ours = json.loads(dash.dashboard_json())
    model = Dashboard.from_json(copy.deepcopy(ours))
    theirs = json.loads(json.dumps(model, cls=JSONEncoder))
    dropped, changed, added = _json_diff(ours, theirs)
    assert not changed, f"grafana-foundation-sdk reads these dashboard fields otherwise: {changed}"
    assert dropped == SDK_CANNOT_MODEL, (
        f"dashboard fields the SDK drops: {sorted(dropped)}; listed: {sorted(SDK_CANNOT_MODEL)}"
    )
    # The SDK fills schema defaults into fields we leave out; a legend must not depend on them
    # (it fills showLegend with false).
    legend = sorted(a for a in added if ".legend." in a)
    assert not legend, f"dashboard legends leave required fields to defaults: {legend}"


# --- Pure builders. ---


def test_helm_values_discover_our_monitors_and_dashboards() -> None:
    values = monitoring.helm_values(_args())
    spec = values["prometheus"]["prometheusSpec"]
    assert spec["podMonitorSelectorNilUsesHelmValues"] is False
    assert spec["ruleSelectorNilUsesHelmValues"] is False
    sidecar = values["grafana"]["sidecar"]["dashboards"]
    assert sidecar["enabled"] is True
    labels = monitoring.dashboard_labels(COMMON)
    assert labels[sidecar["label"]] == sidecar["labelValue"], "dashboard ConfigMap label"
    assert values["nodeExporter"]["enabled"] is False, "node-exporter needs a privileged ns"


@pytest.mark.parametrize(
    ("password", "expected_grafana"),
    [
        (
            "set",
            {
                "admin": {
                    "existingSecret": monitoring.GRAFANA_ADMIN_SECRET,
                    "userKey": monitoring.GRAFANA_USER_KEY,
                    "passwordKey": monitoring.GRAFANA_PASSWORD_KEY,
                }
            },
        ),
        (None, {"adminPassword": ""}),
    ],
)
def test_helm_values_admin_password_source(password: str | None, expected_grafana: dict) -> None:
    secret = pulumi.Output.secret(PASSWORD) if password else None
    grafana = monitoring.helm_values(_args(grafana_admin_password=secret))["grafana"]
    for key, value in expected_grafana.items():
        assert grafana[key] == value, f"helm values grafana.{key}"
    assert ("admin" in grafana) == bool(password) and ("adminPassword" in grafana) != bool(password)


def test_extra_values_are_kept_and_the_programs_own_win() -> None:
    extra = {
        "kubeStateMetrics": {"enabled": False},
        "grafana": {"enabled": False, "sidecar": {"dashboards": {"label": "other"}}},
        "fullnameOverride": "renamed",
        "prometheus": {"prometheusSpec": {"retention": "1d", "replicas": 2}},
    }
    values = monitoring.helm_values(_args(values=extra))
    own = monitoring.helm_values(_args())
    assert values["kubeStateMetrics"] == {"enabled": False}, "a key the program does not set"
    assert values["grafana"]["enabled"] is False, "a key beside the program's grafana settings"
    assert values["prometheus"]["prometheusSpec"]["replicas"] == 2, "a nested key kept"
    assert values["fullnameOverride"] == monitoring.RELEASE_NAME, "the program's name wins"
    assert values["grafana"]["sidecar"] == own["grafana"]["sidecar"], "the program's sidecar wins"
    assert values["prometheus"]["prometheusSpec"]["retention"] == monitoring.RETENTION
    assert extra["fullnameOverride"] == "renamed", "helm_values changed its input"


def test_pod_monitor_spec_scrapes_the_contract_port_and_path() -> None:
    spec = monitoring.pod_monitor_spec(WORKERS)
    assert spec["selector"] == {"matchLabels": WORKERS}
    [endpoint] = spec["podMetricsEndpoints"]
    assert endpoint["port"] == contract.METRICS_PORT_NAME
    assert endpoint["path"] == contract.METRICS_PATH


# --- The component under Pulumi mocks. ---


@dataclass
class Captured:
    inputs: dict[str, MockResourceArgs] = field(default_factory=dict)
    raw: dict[str, dict[str, Any]] = field(default_factory=dict)
    deps: dict[str, list[str]] = field(default_factory=dict)
    urns: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)


class _Mocks(pulumi.runtime.Mocks):
    def __init__(self, captured: Captured) -> None:
        self.captured = captured

    def new_resource(self, args: MockResourceArgs) -> tuple[str, dict]:
        self.captured.inputs[args.name] = args
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:
        return {}


class _WireMonitor(MockMonitor):
    """Keeps each registration as sent on the wire: secret markers and dependencies."""

    def __init__(self, mocks: _Mocks, captured: Captured) -> None:
        super().__init__(mocks)
        self.captured = captured

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        self.captured.raw[request.name] = MessageToDict(request.object)
        self.captured.deps[request.name] = list(request.dependencies)
        response = super().RegisterResource(request)
        self.captured.urns[request.name] = response.urn
        return response


@pytest.fixture(scope="module")
def captured() -> Captured:
    cap = Captured()
    mocks = _Mocks(cap)
    pulumi.runtime.set_mocks(
        mocks, project="tfd", stack="test", preview=False, monitor=_WireMonitor(mocks, cap)
    )

    def program() -> pulumi.Output:
        provider = k8s.Provider("k8s", kubeconfig="{}", enable_server_side_apply=True)
        opts = pulumi.ResourceOptions(provider=provider)
        with_pw = monitoring.Monitoring(
            "mon", _args(grafana_admin_password=pulumi.Output.secret(PASSWORD)), opts
        )
        monitoring.Monitoring("nopw", _args(namespace="monitoring2"), opts)
        monitoring.Monitoring("second", _args(install=False, training_namespace="training2"), opts)
        monitoring.Monitoring(
            "mirror",
            _args(
                namespace="monitoring3",
                chart_repository=MIRROR,
                alert_thresholds=alerts.AlertThresholds(for_minutes=1),
            ),
            opts,
        )
        names = ["grafana_service", "grafana_port_forward", "prometheus_port_forward"]
        names += ["grafana_admin_secret", "namespace"]
        return pulumi.Output.all(*(getattr(with_pw, n) for n in names)).apply(
            lambda values: cap.outputs.update(zip(names, values, strict=True))
        )

    pulumi.runtime.mocks.test(program)()
    return cap


def _k8s_objects(cap: Captured, prefix: str) -> dict[str, MockResourceArgs]:
    return {
        n: a
        for n, a in cap.inputs.items()
        if n.startswith(f"{prefix}-") and a.typ.startswith("kubernetes:")
    }


def test_children_use_the_parent_provider(captured: Captured) -> None:
    objects = _k8s_objects(captured, "mon") | _k8s_objects(captured, "nopw")
    assert len(objects) >= 10, sorted(objects)
    for name, args in objects.items():
        assert args.provider and args.provider.startswith(captured.urns["k8s"]), (
            f"{name}: provider {args.provider!r} is not the parent's kubernetes provider"
        )


def test_release_pins_chart_repo_version_and_namespace(captured: Captured) -> None:
    release = captured.inputs["mon-stack"]
    assert release.typ == "kubernetes:helm.sh/v3:Release"
    inputs = release.inputs
    assert inputs["chart"] == monitoring.CHART_NAME
    assert inputs["version"] == monitoring.DEFAULT_CHART_VERSION
    assert inputs["repositoryOpts"]["repo"] == monitoring.CHART_REPO
    assert inputs["namespace"] == "monitoring"
    assert inputs["name"] == monitoring.RELEASE_NAME
    assert inputs["values"] == monitoring.helm_values(_args(grafana_admin_password="x"))
    assert captured.urns["mon-grafana-admin"] in captured.deps["mon-stack"], "needs the Secret"


def _paths_to(value: Any, needle: str, path: str = "", secret: bool = False) -> list[str]:
    """Where ``needle`` occurs in a wire-format object; ``(secret)`` marks wrapped values."""
    if isinstance(value, dict):
        secret = secret or SECRET_SIG in value
        return [p for k, v in value.items() for p in _paths_to(v, needle, f"{path}.{k}", secret)]
    if isinstance(value, list):
        return [
            p for i, v in enumerate(value) for p in _paths_to(v, needle, f"{path}[{i}]", secret)
        ]
    if isinstance(value, str) and needle in value:
        return [f"{path} (secret)" if secret else path]
    return []


def test_password_only_in_secret_and_marked_secret(captured: Captured) -> None:
    holders = {n: _paths_to(raw, PASSWORD) for n, raw in captured.raw.items()}
    holders = {n: p for n, p in holders.items() if p}
    assert list(holders) == ["mon-grafana-admin"], f"password sent in clear to: {holders}"
    paths = holders["mon-grafana-admin"]
    assert paths and all(p.startswith(".stringData.") for p in paths), paths
    assert all(p.endswith(" (secret)") for p in paths), f"mon-grafana-admin: not secret: {paths}"
    secret = captured.inputs["mon-grafana-admin"].inputs
    assert secret["metadata"]["name"] == monitoring.GRAFANA_ADMIN_SECRET
    assert secret["metadata"]["namespace"] == "monitoring"
    data = secret["stringData"]
    data = data["value"] if SECRET_SIG in data else data
    assert data == {
        monitoring.GRAFANA_USER_KEY: monitoring.GRAFANA_ADMIN_USER,
        monitoring.GRAFANA_PASSWORD_KEY: PASSWORD,
    }, "mon-grafana-admin: stringData"


def test_without_password_no_secret_is_created(captured: Captured) -> None:
    kinds = {a.typ for a in _k8s_objects(captured, "nopw").values()}
    assert "kubernetes:core/v1:Secret" not in kinds, kinds
    assert captured.inputs["nopw-stack"].inputs["values"]["grafana"]["adminPassword"] == ""


def test_pod_monitor_selects_workers_in_training_namespace(captured: Captured) -> None:
    pm = captured.inputs["mon-pod-monitor"].inputs
    assert (pm["apiVersion"], pm["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    assert pm["metadata"]["namespace"] == "training"
    assert pm["spec"]["selector"]["matchLabels"] == WORKERS
    [endpoint] = pm["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == (
        contract.METRICS_PORT_NAME,
        contract.METRICS_PATH,
    )
    assert captured.urns["mon-stack"] in captured.deps["mon-pod-monitor"], "needs the CRDs"


def test_prometheus_rule_carries_the_alert_groups(captured: Captured) -> None:
    rule = captured.inputs["mon-rules"].inputs
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["metadata"]["namespace"] == "training"
    assert rule["spec"] == {"groups": alerts.rule_groups()}
    assert captured.urns["mon-stack"] in captured.deps["mon-rules"], "needs the CRDs"


def test_dashboard_configmap_is_labelled_for_the_sidecar(captured: Captured) -> None:
    cm = captured.inputs["mon-dashboard"].inputs
    values = captured.inputs["mon-stack"].inputs["values"]["grafana"]["sidecar"]["dashboards"]
    assert cm["metadata"]["labels"][values["label"]] == values["labelValue"]
    assert values["searchNamespace"] == cm["metadata"]["namespace"] == "monitoring"
    board = json.loads(cm["data"][dash.FILE_NAME])
    assert board["uid"] == dash.DASHBOARD_UID and board["panels"], "mon-dashboard: JSON model"


def test_namespace_pod_security_and_common_labels(captured: Captured) -> None:
    ns = captured.inputs["mon-namespace"].inputs["metadata"]
    assert ns["name"] == "monitoring"
    assert ns["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert ns["labels"]["pod-security.kubernetes.io/warn"] == "restricted"
    for name, args in _k8s_objects(captured, "mon").items():
        if "metadata" in args.inputs:
            labels = args.inputs["metadata"].get("labels", {})
            assert COMMON.items() <= labels.items(), f"{name}: labels {labels} lack {COMMON}"


def test_outputs_tell_how_to_reach_grafana(captured: Captured) -> None:
    out = captured.outputs
    assert out["namespace"] == "monitoring"
    assert out["grafana_service"] == f"monitoring/{monitoring.GRAFANA_SERVICE}"
    assert out["grafana_port_forward"] == (
        f"kubectl -n monitoring port-forward svc/{monitoring.GRAFANA_SERVICE} 3000:80"
    )
    assert out["prometheus_port_forward"].endswith(f"svc/{monitoring.PROMETHEUS_SERVICE} 9090:9090")
    assert out["grafana_admin_secret"] == f"monitoring/{monitoring.GRAFANA_ADMIN_SECRET}"


@pytest.mark.parametrize("name", ["mon-namespace", "mon-grafana-admin", "mon-dashboard"])
def test_core_objects_match_the_kubernetes_schema(captured: Captured, name: str) -> None:
    manifest = copy.deepcopy(captured.inputs[name].inputs)
    for key, value in manifest.items():
        if isinstance(value, dict) and SECRET_SIG in value:
            manifest[key] = value["value"]
    try:
        kubernetes_validate.validate(manifest, "1.31.0", strict=True)
    except kubernetes_validate.ValidationError as err:
        pytest.fail(f"{name}: {err.message} at {list(err.path)}")


def test_a_second_training_stack_uses_the_existing_install(captured: Captured) -> None:
    """``install=False``: only this stack's PodMonitor and PrometheusRule, in its namespace;
    nothing a second stack could collide with, nothing its destroy could take from others."""
    objects = _k8s_objects(captured, "second")
    kinds = sorted((a.inputs["kind"], a.inputs["metadata"]["namespace"]) for a in objects.values())
    assert kinds == [("PodMonitor", "training2"), ("PrometheusRule", "training2")], kinds
    types = {a.typ for n, a in captured.inputs.items() if n.startswith("second-")}
    assert "kubernetes:helm.sh/v3:Release" not in types, types
    installer = {
        (a.inputs["kind"], a.inputs["metadata"].get("namespace"), a.inputs["metadata"]["name"])
        for n, a in _k8s_objects(captured, "mon").items()
        if "kind" in a.inputs
    }
    for kind, namespace in kinds:
        clash = [o for o in installer if o[0] == kind and o[1] == namespace]
        assert not clash, f"{kind} in {namespace} collides with the installer's {clash}"


def test_release_and_rules_follow_the_repository_and_alert_settings(captured: Captured) -> None:
    assert captured.inputs["mirror-stack"].inputs["repositoryOpts"]["repo"] == MIRROR
    assert captured.inputs["mirror-stack"].inputs["version"] == monitoring.DEFAULT_CHART_VERSION
    rules = captured.inputs["mirror-rules"].inputs["spec"]["groups"][0]["rules"]
    fors = {r["alert"]: r["for"] for r in rules}
    assert fors[alerts.ALERT_WORKERS_MISSING] == "1m", fors
    assert fors == {
        r["alert"]: r["for"] for r in alerts.alert_rules(alerts.AlertThresholds(for_minutes=1))
    }


# --- The stack's monitoring settings (Pulumi.yaml keys), through the real program. ---


def test_production_alerts_wait_five_minutes() -> None:
    # Production alerts keep their 5-minute `for`; only the e2e stack shortens it.
    assert alerts.AlertThresholds().for_minutes == 5, "the production default `for` changed"


def _render_prod(overrides: dict[str, Any]) -> dict[str, Any]:
    """``{resource name: inputs}`` of the prod example with ``overrides`` (short keys)."""
    rendered = render_stack("prod", {f"{PROJECT}:{k}": v for k, v in overrides.items()})
    return {r.name: r.inputs for r in rendered.resources}


def test_stack_settings_reach_the_release_and_rules(tmp_path: Path) -> None:
    values_file = tmp_path / "values.yaml"
    values_file.write_text("kubeStateMetrics:\n  enabled: false\nfullnameOverride: other\n")
    resources = _render_prod(
        {
            "monitoringChartRepository": MIRROR,
            "monitoringValuesFile": str(values_file),
            "monitoringAlertForMinutes": 2,
        }
    )
    release = resources["monitoring-stack"]
    assert release["repositoryOpts"]["repo"] == MIRROR
    assert release["values"]["kubeStateMetrics"] == {"enabled": False}
    assert release["values"]["fullnameOverride"] == monitoring.RELEASE_NAME
    fors = {
        r["alert"]: r["for"] for r in resources["monitoring-rules"]["spec"]["groups"][0]["rules"]
    }
    assert fors[alerts.ALERT_WORKERS_MISSING] == "2m", fors


def test_default_settings_install_from_the_public_repository() -> None:
    resources = _render_prod({})
    release = resources["monitoring-stack"]
    assert release["repositoryOpts"]["repo"] == monitoring.CHART_REPO
    assert release["version"] == monitoring.DEFAULT_CHART_VERSION
    assert "kubeStateMetrics" not in release["values"], "no extra values without a file"
    fors = {
        r["alert"]: r["for"] for r in resources["monitoring-rules"]["spec"]["groups"][0]["rules"]
    }
    assert fors == {r["alert"]: r["for"] for r in alerts.alert_rules()}


INVALID_SETTINGS = [
    ("monitoringChartRepository", "prometheus-community", "http(s):// URL", "prometheus-community"),
    ("monitoringChartRepository", "oci://ghcr.io/charts", "http(s):// URL", "oci://"),
    ("monitoringValuesFile", "no/such/values.yaml", "readable YAML file", "no/such/values.yaml"),
    ("monitoringValuesFile", "<tmp>/list.yaml", "mapping of chart values", "list.yaml"),
    ("monitoringValuesFile", "<tmp>/broken.yaml", "(not valid YAML)", "broken.yaml"),
    ("monitoringAlertForMinutes", 61, "integer in [0, 60]", "61"),
    ("monitoringAlertForMinutes", -1, "integer in [0, 60]", "-1"),
]
FILES = {"list.yaml": "- kubeStateMetrics\n", "broken.yaml": "a: [b\n"}


@pytest.mark.parametrize(("key", "value", "rule", "shown"), INVALID_SETTINGS)
def test_bad_monitoring_settings_are_refused_in_one_line(
    key: str, value: Any, rule: str, shown: str, tmp_path: Path
) -> None:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    if isinstance(value, str):
        value = value.replace("<tmp>", str(tmp_path))
    recorder = Recorder()
    with pytest.raises(ConfigError) as caught:
        render_stack("prod", {f"{PROJECT}:{key}": value}, recorder=recorder)
    lines = [p for p in caught.value.problems if p.startswith(f"{PROJECT}:{key}:")]
    assert len(lines) == 1 and rule in lines[0] and shown in lines[0].partition("; got ")[2], (
        f"{key}={value!r}: {caught.value.problems}"
    )
    assert "\n" not in lines[0] and recorder.resources == [], lines


def test_values_file_is_read_relative_to_the_project_directory() -> None:
    # The stack file is a YAML mapping in the project directory: a relative name resolves there
    # whatever the current directory is.
    resources = _render_prod({"monitoringValuesFile": "Pulumi.prod.yaml"})
    assert "config" in resources["monitoring-stack"]["values"]
    assert (PROJECT_FILE.parent / "Pulumi.prod.yaml").is_file()


# --- The program's custom resources against the tested chart's CRDs. ---


class _CrdLoader(yaml.SafeLoader):
    pass


_CrdLoader.add_constructor("tag:yaml.org,2002:value", _CrdLoader.construct_yaml_str)


def _crd_schema(kind: str) -> dict[str, Any]:
    """``openAPIV3Schema`` of ``kind`` at the program's API version, from the CRDs that the
    tested chart (``tools/versions.env``'s snapshot) installs."""
    from tools import monitoring_chart

    group, version = monitoring.MONITORING_API_VERSION.split("/")
    for path in sorted((monitoring_chart.chart().path / "charts" / "crds" / "crds").glob("*.yaml")):
        text = path.read_text()
        if f"kind: {kind}\n" not in text:  # parse only the candidates: some are 800 kB
            continue
        # YAML 1.1 gives a plain "=" the tag "value", which PyYAML cannot build: the CRDs list
        # "=" among enum values.
        for crd in yaml.load_all(text, Loader=_CrdLoader):
            if crd["spec"]["group"] != group or crd["spec"]["names"]["kind"] != kind:
                continue
            [served] = [v for v in crd["spec"]["versions"] if v["name"] == version]
            assert served["served"], f"{kind} {version} is not served by {path.name}"
            return served["schema"]["openAPIV3Schema"]
    raise AssertionError(f"the tested chart has no CRD for {group} {kind}")


def _undeclared(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Fields of ``value`` that ``schema`` does not declare: the API server would prune them
    without a word (structural schemas drop unknown fields)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict) and "properties" in schema:
        out = []
        for key, item in value.items():
            if key not in schema["properties"]:
                out.append(f"{path}.{key}")
            else:
                out += _undeclared(item, schema["properties"][key], f"{path}.{key}")
        return out
    if isinstance(value, list) and "items" in schema:
        return [p for i, v in enumerate(value) for p in _undeclared(v, schema["items"], path)]
    return []


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        ("PodMonitor", monitoring.pod_monitor_spec(WORKERS)),
        ("PrometheusRule", {"groups": alerts.rule_groups()}),
    ],
)
def test_custom_resources_match_the_tested_charts_crds(kind: str, spec: dict[str, Any]) -> None:
    import jsonschema

    schema = _crd_schema(kind)["properties"]["spec"]
    try:
        jsonschema.Draft7Validator(schema).validate(spec)
    except jsonschema.ValidationError as err:
        pytest.fail(f"{kind} spec: {err.message} at {list(err.absolute_path)}")
    assert not _undeclared(spec, schema, "spec"), f"{kind}: fields the CRD would prune"
