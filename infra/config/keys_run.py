"""The keys of what runs: the training run, the trainer's flags, autoscaling, monitoring and
the trainer image."""

from __future__ import annotations

from infra.config.key import (
    ALERT_FOR_MINUTES,
    CHART_REPOSITORY,
    CHART_VERSION,
    FLAGS,
    IMAGE_TEXT,
    NAMESPACE_MODES,
    TOKEN,
    Key,
)
from infra.config.kinds import (
    Boolean,
    Choice,
    Namespace,
    Secret,
    Text,
    TrainerFlagList,
    ValuesFile,
    Whole,
    dns_label,
)
from trainer.contract import (
    BATCH_SIZE,
    CHECKPOINT_EVERY,
    COLLECTIVE_TIMEOUT,
    COLLECTIVES,
    DNS_SUBDOMAIN,
    EPOCHS,
    HEARTBEAT_TIMEOUT,
    ON_DONE_POD_MODES,
    ON_DONE_SCALE_TO_ZERO,
    PRECISIONS,
    QUEUE_LABEL,
    QUEUE_PRIORITY_CLASS_LABEL,
    REPLICAS,
    RUN_ID,
    RUN_ID_RULE,
    STEPS_PER_EPOCH,
    Interval,
)

QUEUE_OBJECT_NAME = dns_label(
    long_rule="must be at most 63 characters (a label value)",
    why="a Kueue object's name and a label value",
    empty=True,
)
"""``queueName`` and ``queuePriorityClass``: optional, a Kueue object's name and a label value."""

GROUPS: dict[str, tuple[Key, ...]] = {
    "The training run": (
        Key(
            "runId",
            Text(RUN_ID, f"must be {RUN_ID_RULE}"),
            "1",
            f"Identity of the training run ({RUN_ID_RULE}: it names a directory and is a label "
            "value). Each run has its own checkpoint directory "
            "(/checkpoints/<project>/<stack>/<runId> on the claim, "
            "<checkpointUri>/<project>/<stack>/<runId> in a bucket) with its run manifest and "
            "its own DONE. Keep it to resume or extend the run (a new image, more epochs, "
            "another world size); change it to start a new run from step 0: pulumi preview then "
            "shows the worker StatefulSet replaced. A new dataset under the same runId is "
            "refused by the workers (exit 9, nothing written): it needs a new runId.",
        ),
        Key(
            "onDone",
            Choice(ON_DONE_POD_MODES),
            ON_DONE_SCALE_TO_ZERO,
            "What the workers do once the run is done (final model, summary.json and DONE "
            "written): 'scale-to-zero' (the chief scales its StatefulSet to 0 replicas, freeing"
            " CPUs and GPUs; the stack stays without diff and the HPA leaves a StatefulSet at "
            "zero alone) or 'idle' (pods stay up, serving the final metrics, until pulumi "
            "destroy).",
            flag="on_done",
        ),
    ),
    "Training (flags of python -m trainer)": (
        Key(
            "dataset",
            Text(TOKEN, "must be 'synthetic', 'mnist' or a path/URI"),
            FLAGS.dataset,
            "--dataset: 'synthetic', 'mnist', or a .npz/TFRecord path or gs:// URI "
            "reachable from the pods.",
            flag="dataset",
        ),
        Key(
            "epochs",
            Whole(EPOCHS),
            FLAGS.epochs,
            "--epochs ({range}).",
            flag="epochs",
        ),
        Key(
            "batchSize",
            Whole(BATCH_SIZE),
            FLAGS.batch_size,
            "--batch-size, examples per replica per step ({range}); the global batch is this x "
            "replicas (one replica per GPU, or per worker on CPU).",
            flag="batch_size",
        ),
        Key(
            "stepsPerEpoch",
            Whole(STEPS_PER_EPOCH),
            FLAGS.steps_per_epoch,
            "--steps-per-epoch ({range}; 0 = examples // global batch).",
            flag="steps_per_epoch",
        ),
        Key(
            "checkpointEvery",
            Whole(CHECKPOINT_EVERY),
            FLAGS.checkpoint_every,
            "--checkpoint-every, global steps between checkpoints ({range}).",
            flag="checkpoint_every",
        ),
        Key(
            "collective",
            Choice(COLLECTIVES),
            FLAGS.collective,
            "--collective: 'auto', 'ring' or 'nccl' (nccl needs gpusPerWorker >= 1). With GPUs,"
            " 'nccl' and 'auto' (which picks NCCL) open worker-to-worker TCP on every port; "
            "otherwise only grpcPort.",
            flag="collective",
        ),
        Key(
            "collectiveTimeoutSeconds",
            Whole(COLLECTIVE_TIMEOUT),
            int(FLAGS.collective_timeout),
            "--collective-timeout in seconds ({range}); 0 = off, dead peers are found by the "
            "heartbeat (TensorFlow starts a thread per collective when a timeout is set).",
            flag="collective_timeout",
        ),
        Key(
            "heartbeatTimeoutSeconds",
            Whole(HEARTBEAT_TIMEOUT),
            int(FLAGS.heartbeat_timeout),
            "--heartbeat-timeout in seconds ({range}). A frozen or killed peer is detected "
            "within about this long; raise it on heavily loaded nodes, where a late heartbeat "
            "would otherwise end a healthy job.",
            flag="heartbeat_timeout",
        ),
        Key(
            "precision",
            Choice(PRECISIONS),
            FLAGS.precision,
            "--precision: 'auto' (bf16 where it is known faster: GPUs of compute capability "
            ">= 8.0, CPUs with AVX512-BF16 or AMX; else fp32), 'fp32', 'bf16' (refused "
            "by the trainer on hardware without native bfloat16) or 'fp16' (with loss scaling; "
            "needs gpusPerWorker >= 1). Checkpoints restore across a change.",
            flag="precision",
        ),
        Key(
            "allowCpuFallback",
            Boolean(),
            FLAGS.allow_cpu_fallback,
            "--allow-cpu-fallback: train on the CPU when a worker was given GPUs that "
            "TensorFlow cannot see (no driver, no NVIDIA runtime, a CPU image), instead of "
            "stopping with exit 3 and a line naming what to check.",
            flag="allow_cpu_fallback",
        ),
        Key(
            "trainerFlags",
            TrainerFlagList(lambda: OWN_FLAG_KEYS),
            [],
            "Any other flag of python -m trainer (docs/trainer.md lists them), as 'flag=value' "
            "entries ('--' optional; a boolean flag alone), e.g. ['learning-rate=0.01', "
            "'model=my_model:build', 'eval-dataset=/checkpoints/data/eval.tfrecord']. Read by "
            "the trainer's own parser, so its rules apply; a flag with a key of its own "
            "(epochs, batchSize, ...) is refused here. A flag that changes what the run computes "
            "(model, loss, seed, learning rate, data) needs a new runId, as the run manifest "
            "refuses it otherwise.",
        ),
    ),
    "Autoscaling": (
        Key(
            "autoscalingEnabled",
            Boolean(),
            False,
            "Create an autoscaling/v2 HorizontalPodAutoscaler on the StatefulSet. Every resize "
            "changes the world size, so the workers checkpoint and restart together; scale-down"
            " is disabled while a run trains.",
        ),
        Key(
            "autoscalingMinReplicas",
            Whole(REPLICAS),
            2,
            "HPA minReplicas ({range}, <= autoscalingMaxReplicas).",
        ),
        Key(
            "autoscalingMaxReplicas",
            Whole(REPLICAS),
            4,
            "HPA maxReplicas ({range}).",
        ),
        Key(
            "autoscalingCpuLimitUtilization",
            Whole(Interval(1, 100)),
            90,
            "Scale up when the workers' average CPU use exceeds this percent of cpuLimit "
            "({range}). The HPA's target (percent of cpuRequest, as Kubernetes counts) is "
            "computed from it: ceil(this x cpuLimit / cpuRequest).",
        ),
        Key(
            "autoscalingScaleUpWindowSeconds",
            Whole(Interval(60, 1800)),
            300,
            "HPA scale-up stabilization window ({range} s); the CPU use must stay above the "
            "target this long, and at most one worker is added per window.",
        ),
    ),
    "Queue": (
        Key(
            "queueName",
            QUEUE_OBJECT_NAME,
            "",
            "The Kueue LocalQueue the workers wait in (docs/queue.md); empty: no queue. Set, the "
            f"StatefulSet gets the label {QUEUE_LABEL} and its pods wait behind Kueue's "
            "admission gate until the ClusterQueue has quota for all of them, then start "
            "together. Needs autoscalingEnabled false (Kueue refuses every resize but to and "
            "from zero).",
        ),
        Key(
            "queueClusterQueue",
            Text(DNS_SUBDOMAIN, "must be a ClusterQueue name (DNS subdomain)", empty=True),
            "",
            "Empty: the LocalQueue queueName is the platform's and must exist in the namespace. "
            "Set: the stack creates LocalQueue queueName in its namespace, pointing at this "
            "ClusterQueue (needs queueName).",
        ),
        Key(
            "queuePriorityClass",
            QUEUE_OBJECT_NAME,
            "",
            "A Kueue WorkloadPriorityClass ordering the run within its queue (label "
            f"{QUEUE_PRIORITY_CLASS_LABEL}, needs queueName); empty: the queue's default.",
        ),
    ),
    "Monitoring": (
        Key(
            "monitoringEnabled",
            Boolean(),
            False,
            "Deploy kube-prometheus-stack with the trainer's PodMonitor, alerts and dashboard; "
            "allows metrics ingress from monitoringNamespace.",
        ),
        Key(
            "monitoringInstall",
            Boolean(),
            True,
            "With monitoringEnabled: this stack installs the cluster's monitoring (namespace, "
            "kube-prometheus-stack, Grafana dashboard). Set false on every further training "
            "stack of the same cluster: it then uses the install in monitoringNamespace and "
            "adds only its own PodMonitor and alerts, so it neither fails with AlreadyExists "
            "nor removes the cluster's monitoring on destroy.",
        ),
        Key(
            "monitoringNamespace",
            Namespace(allow_system=True),
            "monitoring",
            "Namespace of the monitoring stack (must differ from namespace; never a system "
            "namespace when monitoringEnabled).",
        ),
        Key(
            "monitoringNamespaceMode",
            Choice(NAMESPACE_MODES),
            "create",
            "With monitoringEnabled and monitoringInstall: 'create' makes monitoringNamespace "
            "the stack's own (created with Pod Security 'baseline', deleted on pulumi destroy; "
            "one that already exists fails pulumi up with AlreadyExists); 'existing' installs "
            "into a namespace the stack does not own (never labelled or deleted by it). A stack"
            " with monitoringInstall false never creates the namespace.",
        ),
        Key(
            "monitoringChartVersion",
            Text(CHART_VERSION, "must be an exact chart version 'MAJOR.MINOR.PATCH'"),
            # The tested release: tools/versions.env's chart snapshot, which make e2e installs.
            "88.6.1",
            "Exact kube-prometheus-stack chart version.",
        ),
        Key(
            "monitoringChartRepository",
            Text(CHART_REPOSITORY, "must be the http(s):// URL of a Helm chart repository"),
            "https://prometheus-community.github.io/helm-charts",
            "Helm chart repository (http(s):// URL) that serves kube-prometheus-stack: the "
            "public one, or a mirror.",
        ),
        Key(
            "monitoringValuesFile",
            ValuesFile(),
            "",
            "A YAML file (relative to the project directory) of extra kube-prometheus-stack "
            "values, merged under the program's own (which win: its PodMonitor, rules and "
            "outputs rely on them). Goes into the stack state and the Helm release in plain "
            "text: no secrets. Empty: none.",
        ),
        Key(
            "monitoringAlertForMinutes",
            Whole(Interval(*ALERT_FOR_MINUTES)),
            5,  # infra.alerts.AlertThresholds' default: the production alerts' `for`
            "How long (minutes, {range}) a trainer alert's condition must hold before it fires "
            "(the rules' `for`; restart and resume counts fire at once).",
        ),
        Key(
            "grafanaAdminPassword",
            Secret(),
            "",
            "SECRET (pulumi config set --secret grafanaAdminPassword). Grafana admin password; "
            "empty lets the chart generate one.",
        ),
    ),
    "Trainer image": (
        Key(
            "imageReference",
            IMAGE_TEXT,
            "",
            "A prebuilt trainer image to deploy instead of building the Dockerfile (for images "
            "built by CI): '[registry/]repo[:tag][@sha256:<64 hex>]', pinned by digest when "
            "clusterKind is not minikube. Empty builds the image with the stack (the image* build "
            "settings below).",
        ),
        Key(
            "codeDirectory",
            IMAGE_TEXT,
            "",
            "A directory of your own (relative to the project directory): your --model/--loss "
            "modules and small data, copied to /opt/tfd/code (on PYTHONPATH) in an image built "
            "FROM the trainer image, which the workers then run; its own .dockerignore decides "
            "what goes in. Empty: the trainer image alone. Not with imageReference.",
        ),
        Key(
            "imageRepository",
            IMAGE_TEXT,
            "tf-distributed-trainer",
            "Repository of the trainer image (without registry).",
        ),
        Key(
            "imageTag",
            IMAGE_TEXT,
            "0.1.0",
            "Tag of the trainer image; 'latest' is refused.",
        ),
        Key(
            "imageRegistry",
            IMAGE_TEXT,
            "",
            "Registry host[:port][/path] the image is pushed to; required when clusterKind is "
            "not minikube (Artifact Registry <region>-docker.pkg.dev/<project>/<repository> on "
            "gke, ECR <account>.dkr.ecr.<region>.amazonaws.com on eks, ACR <name>.azurecr.io "
            "on aks).",
        ),
        Key(
            "imageRegistryUsername",
            IMAGE_TEXT,
            "",
            "Registry user; empty uses the host's docker login.",
        ),
        Key(
            "imageRegistryPassword",
            Secret(),
            "",
            "SECRET (pulumi config set --secret imageRegistryPassword). Registry password, with"
            " imageRegistryUsername.",
        ),
        Key(
            "dockerHost",
            Text(empty=True),
            "",
            "Docker daemon that builds the image (DOCKER_HOST form, e.g. minikube docker-env's "
            "tcp://192.168.49.2:2376); empty uses DOCKER_HOST or the local socket.",
        ),
        Key(
            "dockerCertPath",
            Text(empty=True),
            "",
            "Directory with the daemon's TLS ca.pem, cert.pem and key.pem (minikube "
            "docker-env's DOCKER_CERT_PATH).",
        ),
        Key(
            "imagePlatform",
            IMAGE_TEXT,
            "linux/amd64",
            "Target os/arch of the image build; it must match the nodes' architecture (else "
            "pods fail with 'exec format error'). On an arm64 minikube (Apple Silicon) set "
            "linux/arm64, provided the TensorFlow base image is published for it (docker "
            "manifest inspect tensorflow/tensorflow:2.21.0).",
        ),
    ),
}

OWN_FLAG_KEYS: dict[str, str] = {
    key.flag: key.name for keys in GROUPS.values() for key in keys if key.flag
}
"""The trainer flags that have a stack key of their own (flag field -> key), from the keys'
``flag``: ``trainerFlags`` refuses them, and ``infra.pod`` writes them from those keys."""
