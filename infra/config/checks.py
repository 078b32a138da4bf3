"""The rules between keys, in one place: each names the key to change, the rule and its value.

A rule is skipped where a value it needs has none (missing, or not of its key's type): that
key's own problem is reported instead. Values that broke their own rule are still judged
(``replicas: 5`` above ``autoscalingMaxReplicas`` is two problems).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.config.clouds import is_cloud
from infra.config.errors import problem
from infra.config.image import image_problems
from infra.config.kinds import SYSTEM_NAMESPACE_RULE, SYSTEM_NAMESPACES
from infra.config.model import SHM_GIB_PER_GPU, ImageConfig, shm_gib
from trainer.contract import RUN_ID, RUN_ID_RULE, storage_problem

IMAGE_KEYS = {
    "reference": "imageReference",
    "repository": "imageRepository",
    "tag": "imageTag",
    "registry": "imageRegistry",
    "registry_username": "imageRegistryUsername",
    "docker_host": "dockerHost",
    "docker_cert_path": "dockerCertPath",
    "platform": "imagePlatform",
    "code_directory": "codeDirectory",
}
""":class:`~infra.config.model.ImageConfig`'s fields and the keys they are read from (empty
text means ``None`` where the field allows it)."""
_OPTIONAL_IMAGE_FIELDS = frozenset(
    {
        "reference",
        "registry",
        "registry_username",
        "docker_host",
        "docker_cert_path",
        "code_directory",
    }
)


def image_config(v: Mapping[str, Any]) -> ImageConfig:
    """The image settings of the values read (the password is the secret's Output)."""
    fields = {
        name: (v[key] or None) if name in _OPTIONAL_IMAGE_FIELDS else v[key]
        for name, key in IMAGE_KEYS.items()
    }
    return ImageConfig(**fields, registry_password=v["imageRegistryPassword"])


def cross_field_problems(
    v: Mapping[str, Any],
    *,
    secrets_set: frozenset[str],
    environ: Mapping[str, str],
    project: str,
    stack: str,
    building: bool = True,
) -> list[str]:
    """Every rule between keys that the values ``v`` (by short key, ``None``: no value) break.

    Args:
        v: the values read (:attr:`infra.config.reading.Reading.values`).
        secrets_set: the secret keys given a non-empty value.
        environ: the process environment (only ``DOCKER_HOST`` is read).
        project, stack: the Pulumi project and stack names (they name the checkpoint
            directory).
        building: the caller builds or pushes the image (the program, ``tfd submit``); a
            reader of the stack's names (``tfd status``, ``tfd runs``) skips the image's rules,
            which ask for a Docker daemon it does not use.
    """
    out: list[str] = []

    def known(*keys: str) -> bool:
        return all(v[k] is not None for k in keys)

    def fail(key: str, rule: str, value: Any) -> None:
        out.append(problem(key, rule, value))

    # Cluster.
    kind = v["clusterKind"]
    if is_cloud(kind) and not v["kubeContext"] and "kubeconfig" not in secrets_set:
        fail(
            "kubeContext",
            f"clusterKind {kind!r} needs a kube context and/or a secret kubeconfig "
            "(tf-distributed:kubeconfig)",
            "",
        )
    if known("apiServerCidrs", "apiServerPorts") and not (
        v["apiServerCidrs"] and v["apiServerPorts"]
    ):
        fail(
            "apiServerCidrs",
            "must list the API server's endpoint CIDRs (with apiServerPorts): the workers call "
            "it for their own StatefulSet (scale to zero when done, rollouts, live replicas)",
            list(v["apiServerCidrs"]),
        )

    # Workers.
    for limit, request in (("cpuLimit", "cpuRequest"), ("memoryLimit", "memoryRequest")):
        if known(limit, request) and v[limit].value < v[request].value:
            fail(limit, f"must be >= {request} ({v[request].text})", v[limit].text)
    if known("memoryLimit", "gpusPerWorker") and v["gpusPerWorker"] > 0:
        shm = shm_gib(v["gpusPerWorker"])
        if v["memoryLimit"].value < 2 * shm * 2**30:
            fail(
                "memoryLimit",
                f"must be at least {2 * shm}Gi with gpusPerWorker {v['gpusPerWorker']}: the "
                f"memory-backed /dev/shm ({shm}Gi, {SHM_GIB_PER_GPU}Gi per GPU) counts against "
                "it, and the trainer needs as much again",
                v["memoryLimit"].text,
            )
    if known("grpcPort", "metricsPort") and v["grpcPort"] == v["metricsPort"]:
        fail("metricsPort", f"must differ from grpcPort ({v['grpcPort']})", v["metricsPort"])

    # The run: <checkpoint root>/<project>/<stack>/<runId>.
    for what, name in (("project", project), ("stack", stack)):
        if not RUN_ID.match(name):
            out.append(
                f"pulumi {what} name: must be {RUN_ID_RULE} (it names the checkpoint "
                f"directory); got {name!r}"
            )

    # Training.
    for key in ("checkpointUri", "dataset"):
        why = storage_problem(v[key]) if v[key] else None
        if why is not None:
            fail(key, why, v[key])
    if known("egressHttpsCidrs"):
        remote = [
            text
            for text in (v["dataset"] or "", v["checkpointUri"] or "")
            if text == "mnist" or text.startswith("gs:")
        ]
        if remote and not v["egressHttpsCidrs"]:
            fail(
                "egressHttpsCidrs",
                f"must allow HTTPS egress for {remote[0]!r} (dataset or checkpointUri fetched "
                "over the network; the namespace denies all other egress)",
                [],
            )
    for key, needs_gpus, rule in (
        ("collective", "nccl", "'nccl' needs gpusPerWorker >= 1"),
        ("precision", "fp16", "'fp16' needs gpusPerWorker >= 1 (CPUs only emulate it)"),
    ):
        if v[key] == needs_gpus and v["gpusPerWorker"] == 0:
            fail(key, rule, v[key])
    grace, timeout = v["terminationGracePeriodSeconds"], v["collectiveTimeoutSeconds"]
    if known("terminationGracePeriodSeconds", "collectiveTimeoutSeconds") and timeout >= grace:
        fail(
            "terminationGracePeriodSeconds",
            f"must exceed collectiveTimeoutSeconds ({timeout}) so a preempted worker can "
            "finish its checkpoint",
            grace,
        )

    # Autoscaling.
    lo, hi, replicas = v["autoscalingMinReplicas"], v["autoscalingMaxReplicas"], v["replicas"]
    if v["autoscalingEnabled"] and known("autoscalingMinReplicas", "autoscalingMaxReplicas"):
        if lo > hi:
            fail("autoscalingMinReplicas", f"must be <= autoscalingMaxReplicas ({hi})", lo)
        elif known("replicas") and not lo <= replicas <= hi:
            fail(
                "replicas",
                f"must lie within [autoscalingMinReplicas, autoscalingMaxReplicas] = "
                f"[{lo}, {hi}] when autoscaling is enabled",
                replicas,
            )

    # Queue (docs/queue.md).
    if v["queueName"]:
        if v["autoscalingEnabled"]:
            fail(
                "autoscalingEnabled",
                "must be false with queueName set: Kueue refuses every resize of a queued "
                "StatefulSet but to and from zero (resize through zero with: tfd submit "
                "--continue --set replicas=N)",
                True,
            )
    else:
        for key in ("queueClusterQueue", "queuePriorityClass"):
            if v[key]:
                fail(key, "needs queueName (the LocalQueue the workers wait in)", v[key])

    # Monitoring: its namespace names nothing on the cluster while monitoring is off.
    namespace = v["monitoringNamespace"]
    if v["monitoringEnabled"] and namespace is not None:
        if namespace in SYSTEM_NAMESPACES:
            fail("monitoringNamespace", SYSTEM_NAMESPACE_RULE, namespace)
        if namespace == v["namespace"]:
            fail("monitoringNamespace", f"must differ from namespace ({v['namespace']})", namespace)

    # Image: judged by image_problems (shared with infra/image.py).
    if building and known(*IMAGE_KEYS.values()):
        image = image_config(v)
        out += image_problems(image, push=is_cloud(kind), cluster_kind=kind or "")
        docker_env = environ.get("DOCKER_HOST", "")
        if (
            v["clusterKind"] == "minikube"
            and image.reference is None
            and not image.docker_host
            and not docker_env
        ):
            # The local image must land in minikube's own daemon: with the host's daemon the
            # pods end in ErrImageNeverPull and `pulumi up` waits out the StatefulSet timeout.
            fail(
                "dockerHost",
                "a minikube stack that builds its image needs minikube's Docker daemon: run "
                "`eval $(minikube docker-env)` (sets DOCKER_HOST) or set dockerHost",
                "",
            )
    return out
