"""The optional monitoring stack: kube-prometheus-stack plus the trainer's scrape config,
alerts and dashboard, as one Pulumi component.

A cluster has one monitoring install; each training stack has its own scrape config and
alerts. ``monitoringInstall: true`` (the default) makes this stack the installer (namespace,
secret, release, dashboard below); other training stacks on the same cluster set it to
``false`` and only add their PodMonitor and PrometheusRule, in their own namespace, so they
neither collide with the install (``AlreadyExists``) nor remove it on ``pulumi destroy``.

What it creates (every child has ``parent=self`` and so inherits the component's
``kubernetes`` provider; no default provider is ever used):

- a Namespace for the stack (``monitoringNamespaceMode: create``, the default; with
  ``existing`` the release goes into a namespace the stack neither creates, labels nor deletes,
  and its Pod Security level is its owner's). Pod Security ``enforce: baseline`` (``warn``/``audit:
  restricted``): node-exporter is disabled because it needs ``hostNetwork``, ``hostPID`` and
  ``hostPath`` (``privileged``) and reports node, not training, health; everything else the
  chart runs fits ``baseline``. Kubernetes labels it ``kubernetes.io/metadata.name=<name>``,
  which the training NetworkPolicy matches to let Prometheus scrape the workers.
- a Secret with the Grafana admin credentials, handed to the chart through
  ``grafana.admin.existingSecret`` so the password never appears in the Helm values.
- a ``helm.v3.Release`` of ``kube-prometheus-stack`` (pinned chart version) that discovers
  every PodMonitor and PrometheusRule in the cluster and runs Grafana's dashboard sidecar.
- a PodMonitor in the training namespace that scrapes the worker pods' metrics port.
- a PrometheusRule with the trainer alerts (:mod:`infra.alerts`), in the training namespace.
- a ConfigMap with the trainer dashboard (:mod:`infra.dashboards.trainer`), labelled for the
  Grafana sidecar.

Pure builders (:func:`helm_values`, :func:`pod_monitor_spec`, :func:`namespace_labels`,
:func:`dashboard_labels`) hold all the content, so tests check it without Pulumi.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra import alerts
from infra.component import Component
from infra.config import default_of
from infra.dashboards import trainer as trainer_dashboard
from trainer.contract import METRICS_PATH, METRICS_PORT_NAME

CHART_NAME = "kube-prometheus-stack"
CHART_REPO: str = default_of("monitoringChartRepository")
"""The chart's public repository (``monitoringChartRepository``'s default, in the key table)."""
DEFAULT_CHART_VERSION: str = default_of("monitoringChartVersion")
"""The tested kube-prometheus-stack release (``monitoringChartVersion``'s default, in the key
table): the one ``make e2e`` installs on a real node (its operator and image versions are in its
Chart.yaml and values.yaml; docs/monitoring.md)."""

RELEASE_NAME = "tfd-monitoring"
"""Helm release name, also the chart's ``fullnameOverride``: fixed so Service names are known
(the chart would otherwise derive them from the release name and cut them at 26 chars)."""
GRAFANA_SERVICE = f"{RELEASE_NAME}-grafana"
GRAFANA_SERVICE_PORT = 80
"""Port of the Grafana Service (the Grafana chart's default ``service.port``)."""
PROMETHEUS_SERVICE = f"{RELEASE_NAME}-prometheus"
PROMETHEUS_SERVICE_PORT = 9090
"""Port of the Prometheus Service (the chart's default ``prometheus.service.port``)."""
DATASOURCE_UID = "prometheus"
"""Uid of the Prometheus data source the chart provisions in Grafana."""

GRAFANA_ADMIN_SECRET = "tfd-grafana-admin"
GRAFANA_ADMIN_USER = "admin"
GRAFANA_USER_KEY = "admin-user"
GRAFANA_PASSWORD_KEY = "admin-password"

DASHBOARD_LABEL = "grafana_dashboard"
DASHBOARD_LABEL_VALUE = "1"
"""Label (and value) the Grafana sidecar watches for dashboard ConfigMaps."""
DASHBOARD_CONFIGMAP = "tfd-trainer-dashboard"
MONITORING_API_VERSION = "monitoring.coreos.com/v1"
"""API version of the operator's PodMonitor and PrometheusRule kinds (CRDs of the chart)."""
POD_MONITOR_NAME = alerts.POD_MONITOR_NAME
"""Prometheus names the scrape job ``<training namespace>/tfd-workers``; the rules select it."""
PROMETHEUS_RULE_NAME = "tfd-trainer"
SCRAPE_INTERVAL = "15s"
RETENTION = "15d"
"""How long Prometheus keeps samples (the chart's default is 10d)."""
RELEASE_TIMEOUT_S = 900
"""Seconds Helm waits for the stack to become ready (CRDs, operator, Prometheus, Grafana)."""

POD_SECURITY_LEVEL = "baseline"
POD_SECURITY_AUDIT_LEVEL = "restricted"


@dataclass(frozen=True)
class MonitoringArgs:
    """Inputs of :class:`Monitoring`, built by :func:`infra.stack.build_stack` from a config
    that :func:`infra.config.parse_config` has already validated (no second check here).

    Attributes:
        namespace: monitoring namespace to create (RFC 1123 label, at most 63 chars), e.g.
            ``monitoring``.
        chart_version: exact kube-prometheus-stack version (``MAJOR.MINOR.PATCH``); the
            tested one is :data:`DEFAULT_CHART_VERSION`.
        chart_repository: URL of the Helm repository serving the chart (default the public
            :data:`CHART_REPO`).
        values: extra chart values, merged under :func:`helm_values`' own (which win).
        alert_thresholds: the trainer alerts' thresholds (default
            :class:`infra.alerts.AlertThresholds`).
        grafana_admin_password: Grafana ``admin`` password (a secret Output); ``None`` lets the
            Grafana chart generate one into the Secret ``<namespace>/tfd-monitoring-grafana``.
        training_namespace: namespace of the worker pods; the PodMonitor and PrometheusRule
            go there.
        worker_selector: labels of the worker pods (non-empty), matched by the PodMonitor.
        labels: common ``app.kubernetes.io/*`` labels put on every object created here
            (default none).
        install: this stack installs the cluster's monitoring (namespace, Grafana secret,
            kube-prometheus-stack release, dashboard); ``False`` uses an existing install in
            ``namespace`` and creates only this stack's PodMonitor and PrometheusRule.
        create_namespace: the installing stack creates ``namespace`` (its own, deleted on
            destroy); ``False`` installs into an existing namespace it does not own.
    """

    namespace: str
    chart_version: str
    grafana_admin_password: pulumi.Output[str] | None
    training_namespace: pulumi.Input[str]
    worker_selector: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)
    install: bool = True
    chart_repository: str = CHART_REPO
    values: Mapping[str, Any] = field(default_factory=dict)
    alert_thresholds: alerts.AlertThresholds = field(default_factory=alerts.AlertThresholds)
    create_namespace: bool = True


def namespace_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Labels of the monitoring Namespace: the common labels plus Pod Security levels."""
    return {
        **labels,
        "pod-security.kubernetes.io/enforce": POD_SECURITY_LEVEL,
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/warn": POD_SECURITY_AUDIT_LEVEL,
        "pod-security.kubernetes.io/audit": POD_SECURITY_AUDIT_LEVEL,
    }


def dashboard_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Labels of the dashboard ConfigMap: the common labels plus the sidecar's label."""
    return {**labels, DASHBOARD_LABEL: DASHBOARD_LABEL_VALUE}


def merge_values(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in, mappings key by key (as Helm merges values files):
    ``over`` wins wherever both set a key to something other than two mappings."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = value
    return out


def helm_values(args: MonitoringArgs) -> dict[str, Any]:
    """Values for the kube-prometheus-stack chart: ``args.values`` with the program's own
    settings merged over them (the PodMonitor, rules, dashboard and outputs rely on those).
    Never contains the Grafana password."""
    if args.grafana_admin_password is not None:
        admin: dict[str, Any] = {
            "admin": {
                "existingSecret": GRAFANA_ADMIN_SECRET,
                "userKey": GRAFANA_USER_KEY,
                "passwordKey": GRAFANA_PASSWORD_KEY,
            }
        }
    else:
        # The parent chart defaults adminPassword to a well-known string; empty makes the
        # Grafana chart generate a random one instead.
        admin = {"adminPassword": ""}
    own = {
        "fullnameOverride": RELEASE_NAME,
        # node-exporter needs a privileged namespace (hostNetwork/hostPID/hostPath); its
        # default rules would only report it missing.
        "nodeExporter": {"enabled": False},
        "defaultRules": {"rules": {"nodeExporterAlerting": False, "nodeExporterRecording": False}},
        "prometheus": {
            "service": {"port": PROMETHEUS_SERVICE_PORT},
            "prometheusSpec": {
                # Select every PodMonitor/PrometheusRule (not only those labelled with this
                # release), in every namespace: ours live in the training namespace.
                "podMonitorSelectorNilUsesHelmValues": False,
                "ruleSelectorNilUsesHelmValues": False,
                "retention": RETENTION,
                "scrapeInterval": SCRAPE_INTERVAL,
            },
        },
        "grafana": {
            "fullnameOverride": GRAFANA_SERVICE,
            **admin,
            "service": {"port": GRAFANA_SERVICE_PORT},
            "sidecar": {
                "dashboards": {
                    "enabled": True,
                    "label": DASHBOARD_LABEL,
                    "labelValue": DASHBOARD_LABEL_VALUE,
                    "searchNamespace": args.namespace,
                },
                "datasources": {"enabled": True, "uid": DATASOURCE_UID},
            },
        },
    }
    return merge_values(args.values, own)


def pod_monitor_spec(worker_selector: Mapping[str, str]) -> dict[str, Any]:
    """``spec`` of the PodMonitor that scrapes the worker pods in its own namespace."""
    return {
        "selector": {"matchLabels": dict(worker_selector)},
        "podMetricsEndpoints": [
            {
                "port": METRICS_PORT_NAME,
                "path": METRICS_PATH,
                "scheme": "http",
                "interval": SCRAPE_INTERVAL,
            }
        ],
    }


def port_forward_command(namespace: str, service: str, local_port: int, port: int) -> str:
    """The ``kubectl port-forward`` command line that reaches ``service`` on localhost."""
    return f"kubectl -n {namespace} port-forward svc/{service} {local_port}:{port}"


class Monitoring(Component):
    """kube-prometheus-stack, the worker PodMonitor, trainer alerts and dashboard.

    Outputs: ``namespace`` (name), ``grafana_service`` and ``prometheus_service``
    (``<namespace>/<service>``), ``grafana_port_forward`` and ``prometheus_port_forward``
    (commands that serve them on localhost:3000 and :9090), ``grafana_admin_secret``
    (``<namespace>/<secret>`` holding the admin password).
    """

    def __init__(
        self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tfd:infra:Monitoring", name, opts)
        child = self.child_opts()
        admin_secret_ref = (
            GRAFANA_ADMIN_SECRET if args.grafana_admin_password is not None else GRAFANA_SERVICE
        )
        if args.install:
            self.release: k8s.helm.v3.Release | None = self._install(name, args)
            # Read the namespace through the release so these resolve once the stack exists.
            ns_name: pulumi.Output[str] = self.release.namespace
            # The PodMonitor/PrometheusRule kinds exist only once the chart installed its CRDs.
            after_release = self.child_opts(depends_on=[self.release])
        else:
            self.release = None
            ns_name = pulumi.Output.from_input(args.namespace)
            after_release = child

        # PodMonitor and PrometheusRule are the operator's CRDs: pulumi_kubernetes has no typed
        # args for them, so their ``spec`` stays a dictionary (metadata is typed as elsewhere).
        self.pod_monitor = k8s.apiextensions.CustomResource(
            f"{name}-pod-monitor",
            api_version=MONITORING_API_VERSION,
            kind="PodMonitor",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=POD_MONITOR_NAME, namespace=args.training_namespace, labels=dict(args.labels)
            ),
            spec=pod_monitor_spec(args.worker_selector),
            opts=after_release,
        )
        self.prometheus_rule = k8s.apiextensions.CustomResource(
            f"{name}-rules",
            api_version=MONITORING_API_VERSION,
            kind="PrometheusRule",
            # Per training stack, beside its workers: a second stack on the cluster adds its
            # own rule instead of colliding with this one.
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=PROMETHEUS_RULE_NAME,
                namespace=args.training_namespace,
                labels=dict(args.labels),
            ),
            spec={"groups": alerts.rule_groups(args.alert_thresholds)},
            opts=after_release,
        )

        self.namespace: pulumi.Output[str] = ns_name
        self.grafana_service: pulumi.Output[str] = pulumi.Output.concat(
            ns_name, "/", GRAFANA_SERVICE
        )
        self.prometheus_service: pulumi.Output[str] = pulumi.Output.concat(
            ns_name, "/", PROMETHEUS_SERVICE
        )
        self.grafana_port_forward: pulumi.Output[str] = ns_name.apply(
            lambda n: port_forward_command(n, GRAFANA_SERVICE, 3000, GRAFANA_SERVICE_PORT)
        )
        self.prometheus_port_forward: pulumi.Output[str] = ns_name.apply(
            lambda n: port_forward_command(n, PROMETHEUS_SERVICE, 9090, PROMETHEUS_SERVICE_PORT)
        )
        self.grafana_admin_secret: pulumi.Output[str] = pulumi.Output.concat(
            ns_name, "/", admin_secret_ref
        )
        self.register_outputs(
            {
                "namespace": self.namespace,
                "grafana_service": self.grafana_service,
                "prometheus_service": self.prometheus_service,
                "grafana_port_forward": self.grafana_port_forward,
                "prometheus_port_forward": self.prometheus_port_forward,
                "grafana_admin_secret": self.grafana_admin_secret,
            }
        )

    def _install(self, name: str, args: MonitoringArgs) -> k8s.helm.v3.Release:
        """The cluster's monitoring: namespace, Grafana admin secret, release, dashboard."""
        child = self.child_opts()
        namespace: pulumi.Input[str] = args.namespace
        if args.create_namespace:
            ns = k8s.core.v1.Namespace(
                f"{name}-namespace",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=args.namespace, labels=namespace_labels(args.labels)
                ),
                opts=child,
            )
            namespace = ns.metadata.name
        release_deps: list[pulumi.Resource] = []
        if args.grafana_admin_password is not None:
            admin_secret = k8s.core.v1.Secret(
                f"{name}-grafana-admin",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=GRAFANA_ADMIN_SECRET, namespace=namespace, labels=dict(args.labels)
                ),
                type="Opaque",
                string_data={
                    GRAFANA_USER_KEY: GRAFANA_ADMIN_USER,
                    GRAFANA_PASSWORD_KEY: pulumi.Output.secret(args.grafana_admin_password),
                },
                opts=child,
            )
            release_deps.append(admin_secret)
        release = k8s.helm.v3.Release(
            f"{name}-stack",
            k8s.helm.v3.ReleaseArgs(
                name=RELEASE_NAME,
                chart=CHART_NAME,
                version=args.chart_version,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=args.chart_repository),
                namespace=namespace,
                # Chart values are the chart's own schema, not Kubernetes': a dictionary.
                values=helm_values(args),
                timeout=RELEASE_TIMEOUT_S,
            ),
            opts=self.child_opts(depends_on=release_deps),
        )
        self.dashboard = k8s.core.v1.ConfigMap(
            f"{name}-dashboard",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=DASHBOARD_CONFIGMAP,
                namespace=namespace,
                labels=dashboard_labels(args.labels),
            ),
            data={trainer_dashboard.FILE_NAME: trainer_dashboard.dashboard_json()},
            opts=child,
        )
        return release
