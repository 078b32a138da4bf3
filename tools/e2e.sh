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

# Disk headroom, checked before anything starts: the trainer image is built into the Docker data
# root and imported into the node's containerd (about 2.4 GB each, kept between runs), and the
# real node evicts pods when the disk is nearly full. One line instead of a pod that never runs.
min_free_gb=${TFD_E2E_MIN_FREE_GB:-10}
cache_root=$HOME/.cache/tf-distributed
mkdir -p "$cache_root"
for dir in "$cache_root" "$root"; do
  free_gb=$(df -P -BG "$dir" | awk 'NR == 2 {sub("G", "", $4); print $4}')
  if [ "$free_gb" -lt "$min_free_gb" ]; then
    echo "e2e: needs ${min_free_gb} GB free on the disk of $dir (images, cluster state); it has" \
      "${free_gb} GB: free some space (TFD_E2E_MIN_FREE_GB sets the limit)" >&2
    echo "e2e: 0 passed, 1 failed (not enough free disk)"
    exit 1
  fi
done

# One e2e run per machine at a time: every run shares the Docker and containerd data roots under
# ~/.cache/tf-distributed, the host's iptables chains and /tmp/tfd-e2e-volumes. A second run (another
# checkout, a worktree) waits for the first instead of corrupting it.
exec 9>"$cache_root/e2e.lock"
if ! flock -n 9; then
  echo "e2e: another e2e run on this machine holds $cache_root/e2e.lock; waiting for it to end" >&2
  flock 9
fi

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
    >"$docker_dir/dockerd.log" 2>&1 9>&- &
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
# Two clusters, one after the other: kwok's simulated nodes for the engine and policy scenarios
# (fast, many stacks), then one real node (kubelet, containerd, CNI, DNS, policies, metrics) for
# the scenarios whose containers must really run. TFD_E2E_NODES=kwok or =real runs one of them.
nodes=${TFD_E2E_NODES:-kwok real}
reports=()
status=0
up_total=0
for node in $nodes; do
  t0=$(date +%s)
  if ! $py -m tools.cluster up --node "$node"; then
    echo "e2e: the local cluster ($node node) did not start; logs in .tools/cluster/logs" >&2
    $py -m tools.cluster down
    status=1
    continue
  fi
  up_total=$((up_total + $(date +%s) - t0))
  report=.tools/e2e-report-$node.xml
  reports+=("$report")
  if [ "$node" = real ]; then marks="e2e and real_node"; else marks="e2e and not real_node"; fi
  # The scenarios' printed figures go into the report, and from there into the summary.
  $py -m pytest -m "$marks" tests/e2e -p no:cacheprovider --junitxml="$report" \
    -o junit_logging=system-out "$@" || status=1
  $py -m tools.cluster down
done
stop_docker
$py -m tools.e2e_summary "$up_total" "$(($(date +%s) - start))" "$status" "${reports[@]}"
