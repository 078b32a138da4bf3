"""The real node itself (``make cluster-up NODE=real``): containers run, cluster DNS answers,
kube-proxy serves the ``kubernetes`` Service, NetworkPolicy is enforced, metrics flow."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.e2e import realnode
from tests.e2e.harness import Kube

pytestmark = pytest.mark.real_node
NS = "tfd-node-check"


@pytest.fixture(scope="module")
def ns(kube: Kube, real_node: str) -> Iterator[str]:
    realnode.apply(kube, realnode.namespace(NS))
    kube.wait_for("default service account", lambda: kube.get("serviceaccount", "default", NS))
    yield NS
    kube.run("delete", "namespace", NS, "--wait=false", check=False)


@pytest.fixture(scope="module")
def client(kube: Kube, ns: str) -> str:
    realnode.apply(kube, realnode.busybox_pod("client", ns, "sleep 3600"))
    realnode.running(kube, "client", ns)
    return "client"


def test_a_pod_runs_its_container_on_the_node(kube: Kube, ns: str) -> None:
    realnode.apply(
        kube, realnode.busybox_pod("hello", ns, "echo hello from $(hostname); sleep 3600")
    )
    pod = realnode.running(kube, "hello", ns)
    # Running is said when the container starts, before its first line is read back; and an
    # error (kubectl logs says why on stderr) is no log: wait for the line itself.
    kube.wait_for(
        "hello's log line",
        lambda: "hello from hello" in kube.run("logs", "-n", ns, "hello", check=False),
    )
    assert pod["status"]["podIP"].startswith("10.244.0."), pod["status"]
    [status] = pod["status"]["containerStatuses"]
    assert status["imageID"].startswith("sha256:") or "@sha256:" in status["imageID"], status


def test_pods_resolve_the_api_service_and_a_statefulset_pods_name(
    kube: Kube, ns: str, client: str
) -> None:
    web = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "serviceName": "web",
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": realnode.busybox_pod("web", ns, "sleep 3600")["spec"],
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 80}]},
    }
    realnode.apply(kube, service, web)
    pod = realnode.running(kube, "web-0", ns)
    code, out = realnode.exec_in(kube, client, ns, "nslookup kubernetes.default.svc.cluster.local")
    assert code == 0 and "10.96.0.1" in out, out
    name = f"web-0.web.{ns}.svc.cluster.local"

    def resolved() -> str | None:
        code, out = realnode.exec_in(kube, client, ns, f"nslookup {name}")
        return out if code == 0 and pod["status"]["podIP"] in out else None

    # The record needs the pod Ready in its EndpointSlice and CoreDNS's watch; a failed try is
    # an exec and busybox's own retries: 60 s is few tries on a loaded machine.
    kube.wait_for(f"{name} -> {pod['status']['podIP']}", resolved, 180, 2)


def test_kube_proxy_takes_pods_to_the_api_server_through_the_kubernetes_service(
    kube: Kube, ns: str, client: str
) -> None:
    code, out = realnode.exec_in(kube, client, ns, "nc -w 5 kubernetes.default.svc 443 </dev/null")
    assert code == 0, f"TCP to kubernetes.default.svc:443 from a pod: {out}"
    # The Service's endpoint is the API server itself (its own reconciler keeps it).
    endpoints = kube.get("endpoints", "kubernetes", "default")
    [subset] = endpoints["subsets"]
    assert [a["ip"] for a in subset["addresses"]] == ["10.250.0.1"], subset


def test_network_policy_denies_what_it_does_not_allow(kube: Kube, ns: str, client: str) -> None:
    realnode.apply(
        kube,
        realnode.busybox_pod("server", ns, "httpd -f -p 8080 -h /tmp", {"app": "server"}),
        realnode.busybox_pod("friend", ns, "sleep 3600", {"app": "friend"}),
    )
    server = realnode.running(kube, "server", ns)["status"]["podIP"]
    realnode.running(kube, "friend", ns)

    def reachable() -> bool:
        return realnode.connect(kube, client, ns, server, 8080)[0] == 0

    # Running is said once the container starts, not once httpd listens.
    kube.wait_for("before any policy the server reachable", reachable, 60, 1)
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "server-from-friend", "namespace": ns},
        "spec": {
            "podSelector": {"matchLabels": {"app": "server"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "friend"}}}]}],
        },
    }
    realnode.apply(kube, policy)

    def denied() -> str | None:
        # A refusal or a drop: another failure (of kubectl exec, say) is no verdict.
        code, out = realnode.connect(kube, client, ns, server, 8080)
        return out if code != 0 and ("refused" in out or "timed out" in out) else None

    # kube-router rejects (ICMP port unreachable) what no policy allows, once its watch has
    # the policy: seconds, more on a loaded machine (each try is an exec and up to 3 s of nc).
    kube.wait_for("client denied by the policy", denied, 120, 1)
    # The server still listens, as the allowed pod shows.
    code, out = realnode.connect(kube, "friend", ns, server, 8080)
    assert code == 0, f"the policy allows app=friend: {out}"


def test_kubectl_top_pod_reports_cpu_and_memory(kube: Kube, ns: str, client: str) -> None:
    def top() -> str | None:
        result = subprocess.run(
            [kube.kubectl, "--kubeconfig", str(kube.kubeconfig), "top", "pod", "-n", ns, client,
             "--no-headers"],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
        return result.stdout if result.returncode == 0 and client in result.stdout else None

    started = time.monotonic()
    line = kube.wait_for("kubectl top pod", top, 120, 5)
    name, cpu, memory = line.split()[:3]
    assert name == client and cpu.endswith("m") and memory.endswith("Mi"), line
    print(f"kubectl top pod answered after {time.monotonic() - started:.0f} s: {line.strip()}")
