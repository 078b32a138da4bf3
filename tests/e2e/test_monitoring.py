"""The monitoring stack on the real node: ``pulumi up`` of a stack with monitoring on installs
the released kube-prometheus-stack, Prometheus scrapes the workers through the project's
PodMonitor, the operator's admission webhook accepts the project's PrometheusRule, its
worker-missing alert fires in Alertmanager and resolves, every dashboard query returns data, a
second stack that does not install adds only its own objects, and ``pulumi destroy`` of the
installer removes the release.

What this machine cannot run is replaced, never faked, and the stack's values say so
(``tests/e2e/monitoring-values.yaml``, docs/e2e.md): the chart comes from the Go module proxy,
packaged into a Helm repository (``make tools``) that this module serves on loopback and names
in ``monitoringChartRepository``; its images (operator, config reloader, Prometheus,
Alertmanager) are built from their Go modules and imported into the node's containerd under the
references the chart renders; kube-state-metrics and Grafana are off; the webhook's certificate
is made here with openssl (``tools/pki.py``) instead of by the chart's job.

The tests run in file order on one pair of stacks (each step needs the one before).
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from infra import alerts, monitoring
from infra.dashboards import trainer as dash
from tests.e2e import realnode
from tests.e2e.harness import TOOLS, Kube, Project
from tests.e2e.test_image import built, docker  # noqa: F401 - fixtures node_image needs
from tests.e2e.test_real_training import node_image  # noqa: F401 - fixture
from tools import monitoring_chart, monitoring_images, pki
from tools.real_node_config import NODE_NAME
from trainer import contract

# The worker-missing scenario alone waits minutes for the alert and its resolution.
pytestmark = [pytest.mark.real_node, pytest.mark.timeout(900)]
HERE = Path(__file__).resolve().parent
MON = "monitoring"
NS_A, NS_B, NS_OUT = "tfd-mon-a", "tfd-mon-b", "tfd-mon-outsider"
STS = "tfd-worker"
REPOSITORY = TOOLS / "monitoring" / "chart-repository"
RELEASE = monitoring.RELEASE_NAME
OPERATOR = f"{RELEASE}-operator"
PROMETHEUS_STS = f"prometheus-{RELEASE}-prometheus"
ALERTMANAGER = f"{RELEASE}-alertmanager"
ALERTMANAGER_STS = f"alertmanager-{ALERTMANAGER}"
ALERTMANAGER_PORT = 9093
WEBHOOK_SECRET = f"{RELEASE}-admission"
"""The Secret the operator serves its webhook (and metrics) with, keys ``cert`` and ``key``."""
RATE_INTERVAL = "1m"
"""What Grafana makes of ``$__rate_interval`` here: at least four scrape intervals (15 s)."""
TRAINING = {
    # Trains through the whole module (destroy ends it); a checkpoint every few seconds feeds
    # the checkpoint panels' one-minute windows.
    "epochs": 1000,
    "stepsPerEpoch": 1000,
    "checkpointEvery": 40,
    "autoscalingMaxReplicas": 2,
}
RELEASE_CLUSTER_KINDS = (
    "validatingwebhookconfigurations",
    "mutatingwebhookconfigurations",
    "clusterroles",
    "clusterrolebindings",
)
"""Cluster-wide kinds the release creates (labelled ``release=<name>``): a webhook left behind
would refuse every later PrometheusRule."""
FIGURES: dict[str, float] = {}


def log_figure(name: str, seconds: float) -> None:
    FIGURES[name] = round(seconds, 1)
    print(f"[monitoring figure] {name}: {seconds:.1f} s")


# --- Prometheus and Alertmanager through the API server's service proxy. ---


def _proxy(service: str, port: int, path: str) -> str:
    return f"/api/v1/namespaces/{MON}/services/{service}:{port}/proxy{path}"


def prom(kube: Kube, api: str, params: dict[str, str] | None = None) -> Any:
    """``GET /api/v1/<api>?<params>`` of Prometheus; its ``data``."""
    query = "&".join(f"{k}={quote(v, safe='')}" for k, v in (params or {}).items())
    port = monitoring.PROMETHEUS_SERVICE_PORT
    path = _proxy(monitoring.PROMETHEUS_SERVICE, port, f"/api/v1/{api}")
    body = json.loads(kube.run("get", "--raw", f"{path}?{query}" if query else path))
    assert body["status"] == "success", body
    return body["data"]


def instant(kube: Kube, expr: str) -> list[dict]:
    return prom(kube, "query", {"query": expr})["result"]


def by_pod(results: list[dict]) -> dict[str, float]:
    return {r["metric"].get("pod", ""): float(r["value"][1]) for r in results}


def active_alerts(kube: Kube, name: str, namespace: str) -> list[dict]:
    """Alertmanager's active alerts ``name`` for ``namespace`` (resolved ones are not listed)."""
    path = _proxy(ALERTMANAGER, ALERTMANAGER_PORT, "/api/v2/alerts")
    found = json.loads(kube.run("get", "--raw", f"{path}?active=true&silenced=false"))
    return [
        a for a in found
        if a["labels"].get("alertname") == name and a["labels"].get("namespace") == namespace
        and a["status"]["state"] == "active"
    ]  # fmt: skip


# --- Fixtures. ---


@pytest.fixture(scope="module")
def chart_repository() -> Iterator[str]:
    """The packaged chart's Helm repository, served on loopback for the module."""
    if not (REPOSITORY / "index.yaml").exists():
        pytest.fail(f"{REPOSITORY} missing: run `make tools` (tools/build-monitoring.sh)")
    with monitoring_chart.serve(REPOSITORY) as url:
        yield url


@pytest.fixture(scope="module")
def monitoring_images_on_node(real_node: str) -> list[str]:
    """The chart's images, imported into the node's containerd (nothing can be pulled)."""
    started = time.monotonic()
    references = []
    for reference, archive in monitoring_images.archives():
        realnode.ctr("images", "import", "-", stdin=archive)
        references.append(reference)
    log_figure("import of the monitoring images", time.monotonic() - started)
    return references


@pytest.fixture(scope="module")
def values_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The e2e values with the webhook's CA bundle and the Secret holding its certificate
    (a throw-away key: it lands in the stack state and the Helm release with the values)."""
    directory = tmp_path_factory.mktemp("monitoring-values")
    service = f"{OPERATOR}.{MON}.svc"
    sans = [f"DNS:{service}", f"DNS:{service}.cluster.local"]
    certs = pki.ca_and_server(directory, service, sans, days=2)
    values = yaml.safe_load((HERE / "monitoring-values.yaml").read_text())
    b64 = {
        name: base64.b64encode(path.read_bytes()).decode()
        for name, path in (("ca", certs.ca), ("cert", certs.cert), ("key", certs.key))
    }
    values["prometheusOperator"]["admissionWebhooks"]["caBundle"] = b64["ca"]
    values["extraManifests"] = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": WEBHOOK_SECRET, "namespace": MON},
            "type": "Opaque",
            "data": b64,
        }
    ]
    path = directory / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.fixture(scope="module")
def installer(
    new_project: Callable[..., Project],
    node_image: str,  # noqa: F811 - the fixture
    chart_repository: str,
    values_file: Path,
    monitoring_images_on_node: list[str],
) -> Project:
    settings = {
        **TRAINING,
        "monitoringEnabled": True,
        "monitoringNamespace": MON,
        "monitoringChartRepository": chart_repository,
        "monitoringValuesFile": str(values_file),
        # The worker-missing test waits one minute, not the production five.
        "monitoringAlertForMinutes": 1,
    }
    stack = realnode.real_stack(new_project, "mon-a", NS_A, node_image, settings)
    stack.set("grafanaAdminPassword", GRAFANA_PASSWORD, secret=True)
    return stack


@pytest.fixture(scope="module")
def deployed(installer: Project, kube: Kube) -> dict:
    started = time.monotonic()
    installer.up()
    log_figure("pulumi up (install and training stack)", time.monotonic() - started)
    for sts in (PROMETHEUS_STS, ALERTMANAGER_STS):
        kube.wait_for(f"{MON}/{sts} Ready", lambda s=sts: kube.ready_replicas(s, MON) == 1, 300, 2)
    log_figure("pulumi up start to Prometheus and Alertmanager Ready", time.monotonic() - started)
    return {"started": started}


GRAFANA_PASSWORD = "grafana-mon-e2e-Pa55word-3d9e"

# --- The scenario. ---


def test_the_grafana_password_is_used_and_stays_a_secret(
    deployed: dict, installer: Project, kube: Kube
) -> None:
    """Where the secret is really used (the Grafana admin Secret of the install), the stack's
    state, outputs and stack file hold it only encrypted."""
    secret = kube.get("secret", monitoring.GRAFANA_ADMIN_SECRET, MON)
    assert secret is not None, f"{MON}/{monitoring.GRAFANA_ADMIN_SECRET} not created"
    used = base64.b64decode(secret["data"][monitoring.GRAFANA_PASSWORD_KEY]).decode()
    assert used == GRAFANA_PASSWORD, "the Secret does not hold the configured password"
    state = installer.export_text()
    assert GRAFANA_PASSWORD not in state, "pulumi stack export holds the Grafana password"
    assert GRAFANA_PASSWORD not in installer.cli("stack", "output", "--json")
    assert GRAFANA_PASSWORD not in installer.stack_file_text()
    assert '"ciphertext"' in state, "no encrypted secret in the state"


def test_release_installs_and_operator_prometheus_alertmanager_are_ready(
    deployed: dict, kube: Kube, monitoring_images_on_node: list[str]
) -> None:
    operator = kube.get("deployment.apps", OPERATOR, MON)
    assert operator and operator["status"].get("readyReplicas") == 1, (
        operator and operator["status"]
    )
    # The program's default chart version is the one installed (the stack sets no version).
    chart_label = operator["metadata"]["labels"].get("chart")
    assert chart_label == f"{monitoring.CHART_NAME}-{monitoring.DEFAULT_CHART_VERSION}", chart_label
    pods = kube.items("pods", MON)
    running = {
        c["image"]
        for p in pods
        for c in p["spec"]["containers"] + p["spec"].get("initContainers", [])
    }
    assert running == set(monitoring_images_on_node), (
        f"images in {MON}: {sorted(running)}; built and imported: {monitoring_images_on_node}"
    )
    for pod in pods:
        assert pod["spec"]["nodeName"] == NODE_NAME and pod["status"]["phase"] == "Running", (
            f"{pod['metadata']['name']}: {pod['status'].get('phase')}"
        )
    # What the destroy test finds gone must be found here first.
    for kind in RELEASE_CLUSTER_KINDS:
        assert json.loads(kube.run("get", kind, "-l", f"release={RELEASE}", "-o", "json"))["items"]


def test_prometheus_scrapes_every_worker_and_every_documented_series_moves(
    deployed: dict, kube: Kube
) -> None:
    job = f"{NS_A}/{monitoring.POD_MONITOR_NAME}"
    workers = {f"{STS}-0", f"{STS}-1"}
    started = time.monotonic()
    kube.wait_for(
        f"up == 1 for {sorted(workers)} in job {job}",
        lambda: by_pod(instant(kube, f'up{{job="{job}"}} == 1')).keys() == workers,
        240, 5,
    )  # fmt: skip
    log_figure("Prometheus Ready to both workers scraped", time.monotonic() - started)
    names = [f"{n}_count" if n in contract.HISTOGRAMS else n for n in contract.METRIC_NAMES]
    expr = f'group by (__name__, pod) ({{__name__=~"{"|".join(names)}", namespace="{NS_A}"}})'
    present = {(r["metric"]["__name__"], r["metric"]["pod"]) for r in instant(kube, expr)}
    missing = sorted((n, w) for n in names for w in workers if (n, w) not in present)
    assert not missing, f"series Prometheus did not scrape from the workers: {missing}"

    step = f'max({contract.METRIC_STEP}{{namespace="{NS_A}"}})'
    first = float(instant(kube, step)[0]["value"][1])
    kube.wait_for(
        "the global step to move in Prometheus",
        lambda: float(instant(kube, step)[0]["value"][1]) > first, 120, 5,
    )  # fmt: skip
    # A rate needs two samples of each worker in its window: the first minute may hold one.
    rate = f'rate({contract.METRIC_EXAMPLES_TOTAL}{{namespace="{NS_A}"}}[1m]) > 0'
    kube.wait_for(
        "examples/s of both workers from their counters",
        lambda: by_pod(instant(kube, rate)).keys() == workers, 90, 5,
    )  # fmt: skip
    speed = by_pod(instant(kube, f'{contract.METRIC_EXAMPLES_PER_SECOND}{{namespace="{NS_A}"}}'))
    assert speed.keys() == workers and all(v > 0 for v in speed.values()), f"examples/s {speed}"


def test_only_the_monitoring_namespace_reaches_the_metrics_port(deployed: dict, kube: Kube) -> None:
    # Prometheus, in the monitoring namespace, scraped both workers above (up == 1): the
    # positive control. A pod of any other namespace is dropped on the same port.
    realnode.apply(
        kube, realnode.namespace(NS_OUT), realnode.busybox_pod("probe", NS_OUT, "sleep 3600")
    )
    try:
        realnode.running(kube, "probe", NS_OUT)
        worker = kube.get("pod", f"{STS}-0", NS_A)
        code, out = realnode.connect(
            kube, "probe", NS_OUT, worker["status"]["podIP"], contract.DEFAULT_METRICS_PORT
        )
        assert code != 0 and ("refused" in out or "timed out" in out), f"outsider -> metrics: {out}"
    finally:
        kube.run("delete", "namespace", NS_OUT, "--wait=false")


def test_the_webhook_validates_and_prometheus_loads_the_projects_rules(
    deployed: dict, kube: Kube
) -> None:
    # The chart makes the webhook fail closed with a given certificate: the rule exists, so the
    # operator's webhook answered and allowed it. A broken rule is refused by the same webhook,
    # which parses its PromQL (the CRD's schema cannot).
    rule = kube.get("prometheusrules.monitoring.coreos.com", monitoring.PROMETHEUS_RULE_NAME, NS_A)
    assert rule is not None, "the project's PrometheusRule was not created"
    broken = {
        "apiVersion": monitoring.MONITORING_API_VERSION,
        "kind": "PrometheusRule",
        "metadata": {"name": "broken", "namespace": NS_A},
        "spec": {"groups": [{"name": "broken", "rules": [{"alert": "Broken", "expr": "rate("}]}]},
    }
    with pytest.raises(AssertionError, match="could not parse expression"):
        realnode.apply(kube, broken)

    expected = {r["alert"]: r for r in alerts.alert_rules(alerts.AlertThresholds(for_minutes=1))}
    started = time.monotonic()

    def loaded() -> list[dict] | None:
        groups = prom(kube, "rules", {"type": "alert"})["groups"]
        ours = [g for g in groups if g["name"] == alerts.GROUP_NAME and NS_A in g["file"]]
        # A rule is `unknown` until the group's first evaluation after the load: its health,
        # checked below, is known from then on.
        evaluated = all(r["health"] != "unknown" for g in ours for r in g["rules"])
        return ours if ours and evaluated else None

    # The operator's rule ConfigMap reaches the pod's volume at the kubelet's next sync (up to
    # about two minutes), then the reload and an evaluation interval.
    [group] = kube.wait_for("the project's rule group evaluated in Prometheus", loaded, 300, 5)
    log_figure("PrometheusRule loaded by Prometheus", time.monotonic() - started)
    rules = {r["name"]: r for r in group["rules"]}
    assert rules.keys() == expected.keys(), sorted(rules)
    for name, rule in rules.items():
        assert rule["health"] == "ok", f"{name}: {rule.get('lastError')}"
        assert rule["duration"] == int(expected[name]["for"].removesuffix("m")) * 60, name


def _dashboard_queries() -> list[tuple[str, str]]:
    out = []
    for panel in dash.dashboard()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$namespace", NS_A)
            out.append((panel["title"], expr.replace("$__rate_interval", RATE_INTERVAL)))
    return out


def test_every_dashboard_query_returns_data(deployed: dict, kube: Kube) -> None:
    variable = prom(kube, "label/namespace/values", {"match[]": contract.METRIC_STEP})
    assert NS_A in variable, f"the namespace variable's query lists {variable}"

    def numbers(expr: str) -> list[float] | None:
        values = [float(r["value"][1]) for r in instant(kube, expr)]
        return [v for v in values if not math.isnan(v)] or None

    empty = []
    for title, expr in _dashboard_queries():
        try:
            kube.wait_for(f"panel {title!r}", lambda e=expr: numbers(e), 90, 5)
        except AssertionError:
            empty.append(f"{title}: {expr}")
    assert not empty, "dashboard queries without data during training:\n" + "\n".join(empty)


def test_a_worker_that_stays_gone_fires_the_alert_until_it_is_back(
    deployed: dict, kube: Kube
) -> None:
    name = alerts.ALERT_WORKERS_MISSING
    kube.run("cordon", NODE_NAME)
    try:
        kube.run("delete", "pod", f"{STS}-1", "-n", NS_A, "--grace-period=1", "--wait=false")
        gone = time.monotonic()
        try:
            kube.wait_for(
                f"{name} active in Alertmanager", lambda: active_alerts(kube, name, NS_A), 360, 5
            )
        except AssertionError as err:
            seen = by_pod(instant(kube, f'up{{namespace="{NS_A}"}}'))
            pending = [a["labels"] for a in prom(kube, "alerts")["alerts"]]
            raise AssertionError(f"{err}; Prometheus sees up {seen}, alerts {pending}") from None
        log_figure(f"worker gone to {name} in Alertmanager", time.monotonic() - gone)
        pod = kube.get("pod", f"{STS}-1", NS_A)
        assert pod is None or pod["status"].get("phase") == "Pending", pod and pod["status"]
    finally:
        kube.run("uncordon", NODE_NAME)
    back = time.monotonic()
    kube.wait_for(f"{name} resolved", lambda: not active_alerts(kube, name, NS_A), 360, 5)
    log_figure(f"worker rescheduled to {name} resolved", time.monotonic() - back)
    firing = prom(kube, "alerts")["alerts"]
    assert not [a for a in firing if a["labels"].get("alertname") == name], firing


def test_a_second_stack_adds_only_its_monitor_and_rule_and_is_scraped(
    deployed: dict,
    new_project: Callable[..., Project],
    node_image: str,  # noqa: F811 - the fixture
    kube: Kube,
) -> None:
    settings = {
        **TRAINING,
        "replicas": 1,
        "autoscalingEnabled": False,
        "monitoringEnabled": True,
        "monitoringInstall": False,
        "monitoringNamespace": MON,
    }
    second = realnode.real_stack(new_project, "mon-b", NS_B, node_image, settings)
    started = time.monotonic()
    run = second.up()
    log_figure("pulumi up of the second stack", time.monotonic() - started)
    created = {(s.type, s.name) for s in run.steps if s.op == "create"}
    types = {t for t, _ in created}
    assert "kubernetes:helm.sh/v3:Release" not in types, sorted(created)
    custom = sorted(n for t, n in created if t.startswith("kubernetes:monitoring.coreos.com"))
    assert custom == ["monitoring-pod-monitor", "monitoring-rules"], custom
    assert not [n for t, n in created if t == "kubernetes:core/v1:Namespace" and MON in n]

    job = f"{NS_B}/{monitoring.POD_MONITOR_NAME}"
    kube.wait_for(
        f"up == 1 for {STS}-0 in job {job}",
        lambda: by_pod(instant(kube, f'up{{job="{job}"}} == 1')).keys() == {f"{STS}-0"},
        240, 5,
    )  # fmt: skip
    log_figure("second stack up to its worker scraped", time.monotonic() - started)
    started = time.monotonic()
    second.destroy()
    log_figure("pulumi destroy of the second stack", time.monotonic() - started)
    assert kube.ready_replicas(PROMETHEUS_STS, MON) == 1, "the second stack's destroy"
    assert kube.get("prometheusrules.monitoring.coreos.com", monitoring.PROMETHEUS_RULE_NAME, NS_A)


def test_destroy_of_the_installer_removes_the_release(
    installer: Project, deployed: dict, kube: Kube
) -> None:
    started = time.monotonic()
    installer.destroy()
    kube.wait_for(f"namespace {MON} deleted", lambda: kube.get("namespace", MON) is None, 300, 2)
    kube.wait_for(f"no container of {MON} runs", lambda: not realnode.running_tasks(MON), 120, 2)
    log_figure("pulumi destroy of the installer to nothing running", time.monotonic() - started)
    selector = f"release={RELEASE}"
    for kind in RELEASE_CLUSTER_KINDS:
        left = json.loads(kube.run("get", kind, "-l", selector, "-o", "json"))["items"]
        assert not left, f"{kind} left by the release: {[i['metadata']['name'] for i in left]}"
    pods = json.loads(kube.run("get", "pods", "-A", "-l", selector, "-o", "json"))["items"]
    assert not pods, [p["metadata"]["name"] for p in pods]
    print(f"[monitoring figures] {json.dumps(FIGURES)}")
