#!/usr/bin/env bash
# The e2e suite's monitoring stack (`make tools` runs it last, from tools/build-tools.sh):
#
# - kube-prometheus-stack as a Helm repository (index.yaml + .tgz), packaged from the chart
#   snapshot pinned in tools/versions.env (tools/monitoring_chart.py), linked to
#   .tools/monitoring/chart-repository;
# - the binaries of the images that chart runs, at the versions its values.yaml names: the
#   Prometheus Operator and its config reloader, Prometheus and Alertmanager, linked into
#   .tools/bin (tools/monitoring_images.py writes them into images for the real node).
#
# Each is cached by version in $TFD_TOOLS_CACHE (default ~/.cache/tf-distributed/tools), like
# the rest of the toolchain: a second run only re-links. Go builds run under `nice` and one at a
# time: a cold run shares this 2-core machine with the rest of `make tools`.
set -euo pipefail

# shellcheck source=tools/tools-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/tools-lib.sh"
mkdir -p "$root/.tools/monitoring"
# PyYAML reads the chart: the project's venv where it exists, else the system Python.
py=$root/.venv/bin/python
[ -x "$py" ] || py=python3
go_build=(nice -n 19 go build -trimpath)

# `-X` flags of github.com/prometheus/common/version: what `--version` and the build_info
# metric report (the upstream release builds set the same).
version_flags() {
  local p=github.com/prometheus/common/version
  printf -- '-s -w -X %s.Version=%s -X %s.Branch=HEAD -X %s.BuildUser=tf-distributed' \
    "$p" "${1#v}" "$p" "$p"
}

chart_repository() {
  # The packager is part of the cache key: a change to it packages again.
  local dir
  dir=$cache/kube-prometheus-stack-$MONITORING_CHARTS_MODULE-$(sha256sum "$root/tools/monitoring_chart.py" | cut -c1-12)
  if [ ! -s "$dir/index.yaml" ]; then
    log "packaging kube-prometheus-stack from helm-charts $MONITORING_CHARTS_MODULE"
    rm -rf "$dir"
    (cd "$root" && "$py" -m tools.monitoring_chart package "$dir" >/dev/null)
  fi
  ln -sfn "$dir" "$root/.tools/monitoring/chart-repository"
}

# The operator's go.mod replaces its two API modules with directories of its own repository;
# they are published as modules of the same version.
build_operator() {
  local v=$OPERATOR_MODULE_VERSION
  local dir=$cache/prometheus-operator-$v
  if ! cached "$dir" prometheus-operator prometheus-config-reloader; then
    log "building prometheus-operator $v (operator, prometheus-config-reloader)"
    local start=$SECONDS m=github.com/prometheus-operator/prometheus-operator
    rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
    cat >go.mod <<EOF
module tfd.local/tools/prometheus-operator

go 1.26

require $m $v

replace (
	$m/pkg/apis/monitoring => $m/pkg/apis/monitoring $v
	$m/pkg/client => $m/pkg/client $v
)
EOF
    nice -n 19 go get -tool "$m/cmd/operator@$v" "$m/cmd/prometheus-config-reloader@$v"
    "${go_build[@]}" -ldflags "$(version_flags "$v")" -o bin/prometheus-operator "$m/cmd/operator"
    "${go_build[@]}" -ldflags "$(version_flags "$v")" -o bin/prometheus-config-reloader \
      "$m/cmd/prometheus-config-reloader"
    log "built prometheus-operator $v in $((SECONDS - start)) s"
  fi
  link "$dir" prometheus-operator prometheus-config-reloader
}

# Prometheus: the release's `netgo` tag, without `builtinassets` (the web UI's assets are built
# with npm; the API and everything the operator uses work without them), and with only the
# Kubernetes service discovery, the one the operator's configuration uses (`remove_all_sd`,
# `enable_kubernetes_sd`: upstream's own tags for slimmer builds).
build_prometheus() {
  local v=$PROMETHEUS_MODULE_VERSION
  local dir=$cache/prometheus-$v
  if ! cached "$dir" prometheus; then
    log "building prometheus $v"
    local start=$SECONDS m=github.com/prometheus/prometheus
    rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
    # The release's version (3.14.0) is in the module's VERSION file.
    local release
    release=$(go mod download -json "$m@$v" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    release=$(cat "$release/VERSION")
    # Prometheus's go.mod pins cloud.google.com/go with a replace; the wrapper repeats it.
    local gcp
    gcp=$(go mod download -json "$m@$v" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])' \
      | xargs grep -E '^replace cloud.google.com/go ' | awk '{print $NF}')
    printf 'module tfd.local/tools/prometheus\n\ngo 1.26\n\nrequire %s %s\n\nreplace cloud.google.com/go => cloud.google.com/go %s\n' \
      "$m" "$v" "$gcp" >go.mod
    nice -n 19 go get -tool "$m/cmd/prometheus@$v"
    "${go_build[@]}" -tags netgo,remove_all_sd,enable_kubernetes_sd \
      -ldflags "$(version_flags "$release")" -o bin/prometheus "$m/cmd/prometheus"
    log "built prometheus $release in $((SECONDS - start)) s"
  fi
  link "$dir" prometheus
}

# Alertmanager embeds its web UI (ui/app/dist), which the module does not carry (it is built
# with npm): build from a writable copy whose dist holds one page saying so.
build_alertmanager() {
  local v=$ALERTMANAGER_MODULE_VERSION
  local dir=$cache/alertmanager-$v
  if ! cached "$dir" alertmanager; then
    log "building alertmanager $v"
    local start=$SECONDS m=github.com/prometheus/alertmanager mod
    mod=$(go mod download -json "$m@$v" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    rm -rf "$dir" && mkdir -p "$dir" && cp -r "$mod" "$dir/alertmanager" && chmod -R u+w "$dir/alertmanager"
    mkdir -p "$dir/alertmanager/ui/app/dist"
    printf '<!doctype html><title>Alertmanager</title><p>Built without its web UI; the API is at /api/v2/.\n' \
      >"$dir/alertmanager/ui/app/dist/index.html"
    cd "$dir/alertmanager"
    "${go_build[@]}" -tags netgo -ldflags "$(version_flags "$v")" -o "$dir/bin/alertmanager" ./cmd/alertmanager
    log "built alertmanager $v in $((SECONDS - start)) s"
  fi
  link "$dir" alertmanager
}

command -v go >/dev/null || { echo "make tools needs Go (1.26)" >&2; exit 1; }
chart_repository
# The images' module versions, read from the chart's values (one source).
eval "$(cd "$root" && "$py" -m tools.monitoring_chart build-env)"
build_operator
build_prometheus
build_alertmanager
