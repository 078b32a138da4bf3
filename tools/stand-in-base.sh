#!/usr/bin/env bash
# A stand-in for the Dockerfile's base image `tensorflow/tensorflow:<version>` (Docker Hub cannot
# be reached here), built offline-capable from Debian's packages and PyPI:
#   debootstrap (Debian bookworm, minbase, python3 + pip) -> the TensorFlow wheel -> docker import
# It is imported under the very tag the Dockerfile pins, so `docker build .` runs unchanged.
# TEST-ONLY: the real image is Ubuntu-based and carries more; this one carries what the Dockerfile
# needs (python3, pip, TensorFlow, groupadd/useradd).
#
# Usage: DOCKER_HOST=... tools/stand-in-base.sh <tensorflow version>
set -euo pipefail
version=${1:?usage: stand-in-base.sh <tensorflow version>}
tag=tensorflow/tensorflow:$version
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "[stand-in] $tag present"
  exit 0
fi
for tool in debootstrap docker; do
  command -v "$tool" >/dev/null || { echo "[stand-in] $tool missing (apt-get install debootstrap docker.io)" >&2; exit 1; }
done
start=$(date +%s)
rootfs=$(mktemp -d /tmp/tfd-stand-in.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include=python3,python3-pip,ca-certificates bookworm "$rootfs" \
  http://deb.debian.org/debian >"$rootfs.log" 2>&1 || { tail -20 "$rootfs.log" >&2; exit 1; }
# The wheel comes from the host's pip (its cache when warm), the dependencies from PyPI.
wheels=$rootfs/tmp/wheels
mkdir -p "$wheels"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_27_x86_64 --platform manylinux2014_x86_64 -d "$wheels" \
  "tensorflow==$version"
wheel=$(basename "$(ls "$wheels"/tensorflow-*.whl)")
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
# The host's trust store (it may hold the CA of a TLS-inspecting proxy in front of PyPI): pip
# inside the rootfs and, through PIP_CERT, inside `docker build` trusts what the host trusts.
cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
chroot "$rootfs" env -i PATH=/usr/local/bin:/usr/bin:/bin PIP_DISABLE_PIP_VERSION_CHECK=1 \
  PIP_CERT=/etc/ssl/certs/ca-certificates.crt python3 -m pip install --quiet \
  --no-cache-dir --break-system-packages "/tmp/wheels/$wheel"
chroot "$rootfs" python3 -c "import tensorflow as tf; print('[stand-in] tensorflow', tf.__version__)"
rm -rf "$wheels" "$rootfs/etc/resolv.conf" "$rootfs"/var/cache/apt/archives/*.deb
tar -C "$rootfs" -c . | docker import --change 'CMD ["python3"]' \
  --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' - "$tag" >/dev/null
echo "[stand-in] $tag imported in $(($(date +%s) - start)) s"
