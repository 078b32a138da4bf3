# Trainer image: the pinned TensorFlow base image, the trainer's pinned runtime dependencies and
# the `trainer` package, run as an unprivileged user. `pulumi up` builds it (infra/image.py);
# docs/image.md shows how to build and run it by hand.
#
#   CPU: docker build -t tf-distributed-trainer:0.1.0 .
#   GPU: docker build --build-arg TF_EXTRA=and-cuda -t tf-distributed-trainer:0.1.0-gpu .

# One base for both: TensorFlow's CPU image. The GPU build adds TensorFlow's own CUDA extra
# (`tensorflow[and-cuda]` at the base's exact version), which pins CUDA, cuDNN and NCCL as
# wheels from PyPI: no second base tag to trust (TensorFlow has skipped -gpu images before).
FROM tensorflow/tensorflow:2.21.0
ARG TF_EXTRA=""

LABEL org.opencontainers.image.title="tf-distributed-trainer" \
      org.opencontainers.image.description="Multi-worker TensorFlow trainer for a Kubernetes StatefulSet"

# TF_USE_LEGACY_KERAS: Keras 3 model.fit fails under MultiWorkerMirroredStrategy with 2+ workers;
# tf-keras (Keras 2) does not. PYTHONPATH lets `python -m trainer` work from any working directory.
ENV TF_USE_LEGACY_KERAS=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/opt/tfd \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

COPY requirements/trainer.txt /opt/tfd/requirements.txt

# One layer: dependencies (and, for the GPU build, the CUDA wheels), an import smoke test, and
# the runtime user.
# - The entrypoint calls `python`; link it to python3 only where the base image lacks it.
# - PIP_BREAK_SYSTEM_PACKAGES: this image's interpreter serves the trainer alone, so installing
#   next to the base image's TensorFlow is intended (newer distributions refuse it otherwise).
# - tf-keras requires the base image's exact TensorFlow minor version, so the import below fails
#   the build if the pins and the base image ever drift apart.
RUN set -eux; \
    command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python; \
    PIP_BREAK_SYSTEM_PACKAGES=1 python -m pip install --no-cache-dir -r /opt/tfd/requirements.txt; \
    if [ -n "${TF_EXTRA}" ]; then \
        tf_version="$(python -c 'import importlib.metadata as m; print(m.version("tensorflow"))')"; \
        PIP_BREAK_SYSTEM_PACKAGES=1 python -m pip install --no-cache-dir \
            "tensorflow[${TF_EXTRA}]==${tf_version}"; \
    fi; \
    python -c "import prometheus_client, tf_keras"; \
    groupadd --gid 10001 tfd; \
    useradd --uid 10001 --gid 10001 --no-log-init --create-home --home-dir /home/tfd \
        --shell /usr/sbin/nologin tfd

WORKDIR /opt/tfd
# Owned by root and not writable by the runtime user: the code cannot be changed at run time.
COPY trainer/ /opt/tfd/trainer/

# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001

# gRPC (collectives) and HTTP (/metrics, /healthz, /readyz): trainer/contract/env.py defaults.
EXPOSE 2222 8080

# For `docker run`; Kubernetes ignores HEALTHCHECK and uses the StatefulSet's probes instead.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('TFD_METRICS_PORT', '8080') + '/healthz', timeout=4)"]

# Must equal trainer.contract.ENTRYPOINT; the StatefulSet sets only `args`. The supervisor runs
# `python -m trainer <args>` and restarts it in place on a planned restart (exit 75/76).
ENTRYPOINT ["python", "-m", "trainer.supervisor"]
