#!/usr/bin/env bash
# `make tools`: the e2e toolchain, built from the pinned versions in tools/versions.env.
#
# Each tool is built once per version into $TFD_TOOLS_CACHE/<tool>-<version>/bin (outside the
# clone, so a fresh checkout on the same machine, CI's included, reuses it) and linked into
# .tools/bin. A second run with unchanged versions only re-links: seconds.
#
# Modules whose go.mod has `replace` directives cannot be `go install`ed; each is built from a
# small wrapper module that requires it at the pinned version and repeats the replaces it needs.
set -euo pipefail

# shellcheck source=tools/tools-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/tools-lib.sh"

build_pulumi() {
  local dir=$cache/pulumi-$PULUMI_VERSION
  if ! cached "$dir" pulumi; then
    log "building pulumi $PULUMI_VERSION"
    rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
    # pkg/go.mod replaces sdk/v3 with ../sdk (the same release) and atotto/clipboard with a fork.
    local clip
    clip=$(go mod download -json "github.com/pulumi/pulumi/pkg/v3@v$PULUMI_VERSION" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])' \
      | xargs grep -E '^replace github.com/atotto/clipboard' | awk '{print $NF}')
    cat >go.mod <<EOF
module tfd.local/tools/pulumi

go 1.26

require (
	github.com/pulumi/pulumi/pkg/v3 v$PULUMI_VERSION
	github.com/pulumi/pulumi/sdk/v3 v$PULUMI_VERSION
)

replace github.com/atotto/clipboard => github.com/tgummerer/clipboard $clip
EOF
    go get -tool "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi@v$PULUMI_VERSION"
    # The release build's tags and version stamp (without the stamp the CLI reports no version).
    go build -trimpath -tags osusergo,grpcnotrace -o bin/ \
      -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION" \
      github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
  fi
  link "$dir" pulumi
}

build_pulumi_language_python() {
  local v=$PULUMI_LANGUAGE_PYTHON_VERSION
  local patch=$root/tools/patches/pulumi-language-python-runplugin.patch
  # The patch is part of the cache key: a changed patch rebuilds the host.
  local dir
  dir=$cache/pulumi-language-python-$v-$(sha256sum "$patch" | cut -c1-12)
  local tools=(pulumi-language-python pulumi-language-python-exec pulumi-analyzer-policy-python
    pulumi-resource-pulumi-python)
  if ! cached "$dir" "${tools[@]}"; then
    log "building pulumi-language-python $v (patched)"
    local mod
    mod=$(go mod download -json "github.com/pulumi/pulumi/sdk/v3@v$v" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    command -v patch >/dev/null || { echo "make tools needs patch (apt-get install patch)" >&2; exit 1; }
    rm -rf "$dir" && mkdir -p "$dir/bin"
    # The host is a package of the sdk module at this version: build it from a writable copy
    # with the patch applied, through a wrapper that replaces the module with that copy.
    cp -r "$mod" "$dir/sdk" && chmod -R u+w "$dir/sdk"
    patch -d "$dir/sdk" -p1 --quiet <"$patch"
    cd "$dir"
    cat >go.mod <<EOF2
module tfd.local/tools/pulumi-language-python

go 1.21

require github.com/pulumi/pulumi/sdk/v3 v$v

replace (
	github.com/pulumi/pulumi/sdk/v3 => ./sdk
	golang.org/x/text => golang.org/x/text v0.3.6
)
EOF2
    go get "github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python@v$v"
    go build -trimpath -o bin/ \
      -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$v" \
      github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python
    # The host runs the -exec script found next to it; the shims are what older engines ran.
    cp sdk/python/cmd/pulumi-language-python-exec sdk/python/dist/pulumi-analyzer-policy-python \
      sdk/python/dist/pulumi-resource-pulumi-python bin/
    chmod 755 bin/*
  fi
  link "$dir" "${tools[@]}"
}

# The provider plugin is registered under the version of the Python SDK the program pins (the
# engine loads only a plugin of that version), read from requirements/infra.txt: one pin.
kubernetes_sdk_version() {
  sed -n 's/^pulumi-kubernetes==//p' "$root/requirements/infra.txt"
}

build_pulumi_kubernetes() {
  local plugin patch
  plugin=$(kubernetes_sdk_version)
  patch=$root/tools/patches/pulumi-kubernetes-create-fails-on-existing.patch
  # The source commit, the registered version and the patch are the cache key.
  local dir
  dir=$cache/pulumi-resource-kubernetes-$PULUMI_KUBERNETES_MODULE-$plugin-$(sha256sum "$patch" | cut -c1-12)
  if ! cached "$dir" pulumi-resource-kubernetes; then
    log "building pulumi-resource-kubernetes from $PULUMI_KUBERNETES_MODULE as $plugin (patched)"
    local mod
    mod=$(go mod download -json \
      "github.com/pulumi/pulumi-kubernetes/provider/v4@$PULUMI_KUBERNETES_MODULE" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    rm -rf "$dir" && mkdir -p "$dir"
    # The provider embeds generated files (schema-embed.json, terraform-mapping-embed.json) that
    # the module zip lacks: build from a writable copy after its own `go generate` step.
    cp -r "$mod" "$dir/provider" && chmod -R u+w "$dir/provider" && cd "$dir/provider"
    # Released providers (4.29 on) create with a client-side create that fails on an existing
    # object; this commit still upserts. The patch gives it the released behaviour (docs/e2e.md).
    patch -p1 --quiet <"$patch"
    go mod edit -replace \
      "github.com/pulumi/pulumi-kubernetes/sdk/v4=github.com/pulumi/pulumi-kubernetes/sdk/v4@$PULUMI_KUBERNETES_GO_SDK"
    go mod download
    (cd cmd/pulumi-resource-kubernetes && VERSION=$plugin go run generate.go)
    go build -trimpath -o "$dir/bin/" \
      -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$plugin" \
      ./cmd/pulumi-resource-kubernetes
  fi
  link "$dir" pulumi-resource-kubernetes
}

# k8s_wrapper DIR: a wrapper module in DIR requiring k8s.io/kubernetes at the pinned version.
# k8s.io/kubernetes replaces every staging module with ./staging/...; the same modules are
# published as k8s.io/<name> v0.<minor>.<patch>.
k8s_wrapper() {
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@v$KUBERNETES_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  {
    printf 'module tfd.local/tools/kubernetes\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' \
      "$KUBERNETES_VERSION"
    grep -E '^\s*k8s.io/[a-z0-9-]+ => \./staging/' "$gomod" \
      | awk -v v="v0.${KUBERNETES_VERSION#1.}" '{printf "\t%s => %s %s\n", $1, $1, v}'
    printf ')\n'
  } >"$1/go.mod"
}

# k8s_build NAME TOOLS...: the Kubernetes commands TOOLS into $cache/NAME-<version>/bin.
k8s_build() {
  local name=$1; shift
  local dir=$cache/$name-$KUBERNETES_VERSION
  if ! cached "$dir" "$@"; then
    log "building $name $KUBERNETES_VERSION ($*)"
    local start=$SECONDS
    rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
    k8s_wrapper "$dir"
    local minor=${KUBERNETES_VERSION#1.}
    minor=${minor%%.*}
    local t pkgs=()
    for t in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$t@v$KUBERNETES_VERSION"); done
    go get -tool "${pkgs[@]}"
    local v=v$KUBERNETES_VERSION
    # Upstream's build tags and version stamps (kubectl version and the apiserver's /version).
    go build -trimpath -tags selinux,notest -o bin/ \
      -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$v \
        -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
        -X k8s.io/client-go/pkg/version.gitVersion=$v" \
      "${pkgs[@]/%@$v/}"
    log "built $name $KUBERNETES_VERSION in $((SECONDS - start)) s"
  fi
  link "$dir" "$@"
}

build_kubernetes() {
  k8s_build kubernetes kube-apiserver kube-controller-manager kube-scheduler kubectl
}

# The real node's Kubernetes parts: the same wrapper module, a cache directory of their own (so
# adding them never rebuilds or removes the control plane's binaries).
build_kubernetes_node() {
  k8s_build kubernetes-node kubelet kube-proxy
}

build_kwok() {
  local dir=$cache/kwok-$KWOK_VERSION
  if ! cached "$dir" kwok; then
    log "building kwok $KWOK_VERSION"
    rm -rf "$dir" && mkdir -p "$dir"
    GOBIN=$dir/bin go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
  fi
  if [ ! -s "$dir/stages.yaml" ]; then
    # kwok starts with no behaviour: these are the stages `kwokctl` installs by default (nodes
    # initialised at once and kept alive by leases; pods Ready at once, deleted when asked).
    local mod
    mod=$(go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    local f
    for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
      pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
      printf -- '---\n' && cat "$mod/kustomize/stage/$f.yaml"
    done >"$dir/stages.yaml"
  fi
  link "$dir" kwok
  ln -sfn "$dir/stages.yaml" "$root/.tools/kwok-stages.yaml"
}

# go_tool NAME VERSION PACKAGE@VERSION: a module without replace directives, built through a
# wrapper module (`go get -tool`, so its go.mod's requirements decide every dependency).
go_tool() {
  local name=$1 version=$2 pkg=$3
  local dir=$cache/$name-$version
  if ! cached "$dir" "$name"; then
    log "building $name $version"
    local start=$SECONDS
    rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
    printf 'module tfd.local/tools/%s\n\ngo 1.24\n' "$name" >go.mod
    go get -tool "$pkg"
    go build -trimpath -ldflags "-s -w" -o "bin/$name" "${pkg%@*}"
    log "built $name $version in $((SECONDS - start)) s"
  fi
  link "$dir" "$name"
}

# The pod sandbox image's one binary (tools/pause), keyed by its source: static, no cgo.
build_pause() {
  local dir
  dir=$cache/pause-$(cat "$root/tools/pause/main.go" "$root/tools/pause/go.mod" | sha256sum | cut -c1-12)
  if ! cached "$dir" pause; then
    log "building pause"
    rm -rf "$dir" && mkdir -p "$dir/bin"
    (cd "$root/tools/pause" && go build -trimpath -ldflags "-s -w" -o "$dir/bin/pause" .)
  fi
  link "$dir" pause
}

# The real node's stand-in GPU device plugin (tools/devplugin), keyed by its source, test and
# module files, and tested (against a fake kubelet) before each build. Its go.mod pins
# k8s.io/kubelet at the staging version of KUBERNETES_VERSION (the kubelet's own device-plugin
# API); a test (tests/tools/test_versions.py) keeps them equal.
build_devplugin() {
  local src=$root/tools/devplugin dir
  dir=$cache/devplugin-$(cat "$src"/*.go "$src/go.mod" "$src/go.sum" | sha256sum | cut -c1-12)
  if ! cached "$dir" devplugin; then
    log "building devplugin"
    rm -rf "$dir" && mkdir -p "$dir/bin"
    (cd "$src" && go vet . && go test -count=1 . >&2 \
      && go build -trimpath -ldflags "-s -w" -o "$dir/bin/devplugin" .)
  fi
  link "$dir" devplugin
}

# The real node's cluster add-ons (`make cluster-up NODE=real`).
build_node_addons() {
  go_tool coredns "$COREDNS_VERSION" "github.com/coredns/coredns@v$COREDNS_VERSION"
  go_tool kube-router "$KUBE_ROUTER_VERSION" \
    "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@v$KUBE_ROUTER_VERSION"
  go_tool metrics-server "$METRICS_SERVER_VERSION" \
    "sigs.k8s.io/metrics-server/cmd/metrics-server@v$METRICS_SERVER_VERSION"
}

# The gs:// scenarios' object store: a GCS JSON API server on this machine (docs/e2e.md).
build_object_store() {
  go_tool fake-gcs-server "$FAKE_GCS_SERVER_VERSION" \
    "github.com/fsouza/fake-gcs-server@v$FAKE_GCS_SERVER_VERSION"
}

# The queue scenarios' Kueue controller, and its CRDs from the same module (tools/kueue.py
# applies them; the webhook manifests are read from the module cache at run time).
build_kueue() {
  go_tool kueue "$KUEUE_VERSION" "sigs.k8s.io/kueue/cmd/kueue@v$KUEUE_VERSION"
  local dir=$cache/kueue-$KUEUE_VERSION
  if [ ! -s "$dir/crds.yaml" ]; then
    local mod f
    mod=$(go mod download -json "sigs.k8s.io/kueue@v$KUEUE_VERSION" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    for f in "$mod"/config/components/crd/bases/*.yaml; do
      printf -- '---\n' && cat "$f"
    done >"$dir/crds.yaml.tmp"
    cp "$mod/config/components/webhook/manifests.yaml" "$dir/webhooks.yaml"
    mv "$dir/crds.yaml.tmp" "$dir/crds.yaml"
  fi
  mkdir -p "$root/.tools/kueue"
  ln -sfn "$dir/crds.yaml" "$root/.tools/kueue/crds.yaml"
  ln -sfn "$dir/webhooks.yaml" "$root/.tools/kueue/webhooks.yaml"
}

etcd_from_debian() {
  if ! command -v etcd >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      log "installing Debian's etcd-server"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
    else
      echo "etcd missing: install Debian's 'etcd-server' package (apt-get install etcd-server)" >&2
      exit 1
    fi
  fi
  # Debian starts no daemon here (no systemd); cluster-up runs its own etcd on loopback.
  ln -sfn "$(command -v etcd)" "$bin/etcd"
}

docker_from_debian() {
  # The image tests' Docker engine, the stand-in base image's root filesystem builder and the
  # image-build scenarios' registry.
  if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null \
    || ! command -v docker-registry >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      log "installing Debian's docker.io and debootstrap"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        docker.io debootstrap docker-registry >/dev/null
    else
      echo "dockerd, debootstrap or docker-registry missing: apt-get install docker.io" \
        "debootstrap docker-registry" >&2
      exit 1
    fi
  fi
}

node_from_debian() {
  # The real node's runtime (containerd, runc), CNI plugins, nft (kube-proxy's nftables mode),
  # conntrack (kube-proxy clears stale UDP entries), ipset (kube-router's policies) and a static
  # busybox for the node's images.
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v nft >/dev/null || missing+=(nftables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v ipset >/dev/null || missing+=(ipset)
  dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      log "installing Debian's ${missing[*]}"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
    else
      echo "the real node needs: apt-get install ${missing[*]}" >&2
      exit 1
    fi
  fi
}

register_plugins() {
  # The engine must never try to download a plugin: register the built provider offline in the
  # Pulumi home the e2e tests use.
  local home=$root/.tools/pulumi-home plugin
  plugin=$(kubernetes_sdk_version)
  mkdir -p "$home"
  # Installed again each time: the binary behind a version can change (a new patch).
  PULUMI_HOME=$home PULUMI_SKIP_UPDATE_CHECK=true "$bin/pulumi" plugin install resource \
    kubernetes "$plugin" --file "$bin/pulumi-resource-kubernetes" --reinstall >&2
}

start=$(date +%s)
command -v go >/dev/null || { echo "make tools needs Go (1.26)" >&2; exit 1; }
build_pulumi
build_pulumi_language_python
build_pulumi_kubernetes
build_kubernetes
build_kwok
build_kubernetes_node
build_node_addons
build_pause
build_devplugin
build_object_store
build_kueue
etcd_from_debian
docker_from_debian
node_from_debian
register_plugins
"$root/tools/build-monitoring.sh"
log "ready in $(($(date +%s) - start)) s: $(ls "$bin" | tr '\n' ' ')"
