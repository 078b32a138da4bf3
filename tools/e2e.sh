#!/usr/bin/env bash
# `make e2e`: a fresh local cluster, the e2e suite with the real Pulumi CLI, the cluster stopped
# whatever happened, and one summary line.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
py=.venv/bin/python
# shellcheck source=tools/versions.env
source tools/versions.env
start=$(date +%s)

# A Docker daemon of our own for the image tests: a private socket, no bridge network and no
# iptables rules (builds use the host's network), images kept by version in the tools cache.
docker_dir=$root/.tools/docker
docker_pid=
start_docker() {
  mkdir -p "$docker_dir"
  dockerd --iptables=false --ip6tables=false --bridge=none \
    --host "unix://$docker_dir/docker.sock" --exec-root "$docker_dir/exec" \
    --pidfile "$docker_dir/dockerd.pid" \
    --data-root "${TFD_DOCKER_DATA:-$HOME/.cache/tf-distributed/docker}" \
    >"$docker_dir/dockerd.log" 2>&1 &
  docker_pid=$!
  export DOCKER_HOST=unix://$docker_dir/docker.sock
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
  echo "dockerd did not start (log: $docker_dir/dockerd.log)" >&2
  return 1
}
stop_docker() {
  [ -n "$docker_pid" ] || return 0
  kill "$docker_pid" 2>/dev/null
  for _ in $(seq 30); do kill -0 "$docker_pid" 2>/dev/null || return 0; sleep 1; done
  kill -9 "$docker_pid" 2>/dev/null
}
trap stop_docker EXIT

if ! start_docker || ! tools/stand-in-base.sh "$TENSORFLOW_VERSION"; then
  echo "e2e: 0 passed, 1 failed (the Docker daemon or the stand-in base image failed)"
  exit 1
fi
if ! $py tools/cluster.py up; then
  echo "e2e: 0 passed, 1 failed (the local cluster did not start; logs in .tools/cluster/logs)"
  exit 1
fi
up_s=$(($(date +%s) - start))
report=.tools/e2e-report.xml
$py -m pytest -m e2e tests/e2e -p no:cacheprovider --junitxml="$report" "$@"
status=$?
$py tools/cluster.py down
stop_docker
$py - "$report" "$up_s" "$(($(date +%s) - start))" <<'PY'
import sys
import xml.etree.ElementTree as ET

report, up_s, total_s = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = n["failures"] + n["errors"]
    passed = n["tests"] - failed - n["skipped"]
except (OSError, ET.ParseError):
    passed, failed, n = 0, 1, {"skipped": 0}
print(f"e2e: {passed} passed, {failed} failed, {n['skipped']} skipped "
      f"(docker and cluster up {up_s} s, whole run {total_s} s)")
PY
exit $status
