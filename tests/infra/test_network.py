"""HTTPS and metadata egress: every configured CIDR minus the in-cluster, private and metadata
ranges in it, the metadata server only for a gs:// location, and the pods each policy selects."""

from __future__ import annotations

import ipaddress

import pytest

from infra.network import EXCEPTED_RANGES, excepted_ranges
from tfd.runs_reader import reader_pod
from tools.render import render_stack

P = "tf-distributed:"
IPV4_EXCEPTS = ["169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"]


def _https_blocks(overrides):
    result = render_stack("prod", overrides)
    (policy,) = [
        p for p in result.by_kind("NetworkPolicy") if p["metadata"]["name"] == "tfd-https-egress"
    ]
    (rule,) = policy["spec"]["egress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 443}]
    return [peer["ipBlock"] for peer in rule["to"]]


@pytest.mark.parametrize(
    ("cidrs", "blocks"),
    [
        # The prod example's "anywhere on 443": the internet, not the metadata server or pods.
        (["0.0.0.0/0"], [{"cidr": "0.0.0.0/0", "except": IPV4_EXCEPTS}]),
        (["::/0"], [{"cidr": "::/0", "except": ["fe80::/10", "fc00::/7"]}]),
        # An explicit private range is wanted as written (an internal mirror).
        (
            ["0.0.0.0/0", "10.20.0.0/16"],
            [{"cidr": "0.0.0.0/0", "except": IPV4_EXCEPTS}, {"cidr": "10.20.0.0/16"}],
        ),
        (["10.0.0.0/8"], [{"cidr": "10.0.0.0/8"}]),
        (["169.254.0.0/15"], [{"cidr": "169.254.0.0/15", "except": ["169.254.0.0/16"]}]),
        (["142.250.0.0/15"], [{"cidr": "142.250.0.0/15"}]),
    ],
)
def test_https_egress_excepts_private_and_metadata_ranges(cidrs, blocks):
    assert _https_blocks({P + "egressHttpsCidrs": cidrs}) == blocks, cidrs


def test_the_metadata_server_is_never_reachable_on_443_through_a_wide_range():
    metadata = ipaddress.ip_address("169.254.169.254")
    for block in _https_blocks({}):
        if metadata in ipaddress.ip_network(block["cidr"]):
            assert any(metadata in ipaddress.ip_network(e) for e in block["except"]), block


def test_excepts_are_strict_subsets_of_the_same_ip_version():
    # The API server refuses an except that is not strictly inside its cidr.
    for cidr in ("0.0.0.0/0", "::/0", "10.0.0.0/7", "192.168.0.0/16"):
        network = ipaddress.ip_network(cidr)
        for text in excepted_ranges(cidr):
            excepted = ipaddress.ip_network(text)
            assert excepted.version == network.version and excepted != network, (cidr, text)
            assert excepted.subnet_of(network), (cidr, text)
    assert set(excepted_ranges("0.0.0.0/0")) | set(excepted_ranges("::/0")) == set(EXCEPTED_RANGES)


def _metadata_rules(stack: str, overrides: dict) -> list[tuple[str, int]] | None:
    result = render_stack(stack, overrides)
    found = [p for p in result.by_kind("NetworkPolicy") if p["metadata"]["name"].endswith(
        "-metadata-egress")]  # fmt: skip
    if not found:
        return None
    (policy,) = found
    assert policy["spec"]["policyTypes"] == ["Egress"], policy
    rules = []
    for rule in policy["spec"]["egress"]:
        ((peer,), (port,)) = rule["to"], rule["ports"]
        rules.append((peer["ipBlock"]["cidr"], int(port["port"])))
    return rules


GS = {P + "checkpointUri": "gs://my-bucket/tfd"}
GKE_METADATA = [("169.254.169.254/32", 80), ("169.254.169.252/32", 988)]


@pytest.mark.parametrize(
    ("stack", "overrides", "rules"),
    [
        # A gs:// run on GKE gets its Workload Identity token from the GKE metadata server:
        # without this rule every worker's first gs:// access stalls ~11 minutes, then fails.
        ("gke", GS, GKE_METADATA),
        # A claim needs no token: the metadata server stays unreachable.
        ("gke", {}, None),
        # EKS and AKS give a pod its identity without a metadata server.
        ("eks", GS, None),
        ("aks", GS, None),
        # Any cloud can name its own; only with a gs:// location.
        ("prod", {**GS, P + "metadataEgress": ["169.254.169.254/32:80"]},
         [("169.254.169.254/32", 80)]),
        ("prod", {P + "metadataEgress": ["169.254.169.254/32:80"]}, None),
        # Set explicitly on gke, the stack's value wins.
        ("gke", {**GS, P + "metadataEgress": ["10.1.2.3/32:8080"]}, [("10.1.2.3/32", 8080)]),
    ],
    ids=["gke gs://", "gke claim", "eks gs://", "aks gs://", "prod gs:// set", "prod claim set",
         "gke gs:// overridden"],
)  # fmt: skip
def test_the_metadata_server_is_reachable_only_for_a_gs_location_and_on_its_own_port(
    stack: str, overrides: dict, rules: list | None
) -> None:
    assert _metadata_rules(stack, overrides) == rules, f"stack {stack}: {overrides}"


def _selects(policy: dict, labels: dict[str, str]) -> bool:
    selector = policy["spec"]["podSelector"]
    assert not selector.get("matchExpressions"), policy["metadata"]["name"]
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


@pytest.mark.parametrize(
    ("policy", "reader"),
    [
        ("tfd-default-deny", True),
        ("tfd-dns", True),
        # The bucket and its token: `tfd runs` of a stopped gs:// run reads the records there.
        ("tfd-https-egress", True),
        ("tfd-metadata-egress", True),
        # What only workers do: their peers' port, their StatefulSet through the API server.
        ("tfd-workers-nccl", False),  # the gke example has GPU workers
        ("tfd-api-server", False),
    ],
)
def test_the_run_reader_pod_gets_the_buckets_egress_and_nothing_only_workers_have(
    policy: str, reader: bool
) -> None:
    result = render_stack("gke", GS)
    sts = result.one("StatefulSet")
    pod = reader_pod(sts, "tfd-worker-runs-x")
    policies = {p["metadata"]["name"]: p for p in result.by_kind("NetworkPolicy")}
    workers = sts["spec"]["template"]["metadata"]["labels"]
    assert _selects(policies[policy], workers), f"NetworkPolicy {policy} misses the workers"
    assert _selects(policies[policy], pod["metadata"]["labels"]) is reader, (
        f"NetworkPolicy {policy}: the run reader selected should be {reader}"
    )
