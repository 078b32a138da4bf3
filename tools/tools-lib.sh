# shellcheck shell=bash
# What tools/build-tools.sh and tools/build-monitoring.sh share (sourced, never run): the pinned
# versions, the cache and link directories, the Go settings, and the cache helpers.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tools/versions.env
source "$root/tools/versions.env"
cache=${TFD_TOOLS_CACHE:-$HOME/.cache/tf-distributed/tools}
bin=$root/.tools/bin
mkdir -p "$cache" "$bin"
export GOFLAGS=-mod=mod CGO_ENABLED=0

log() { printf '[tools] %s\n' "$*" >&2; }

# cached DIR BINARIES... : true when every binary is already in the cache directory DIR.
cached() {
  local dir=$1; shift
  local b
  for b in "$@"; do [ -x "$dir/bin/$b" ] || return 1; done
}

# link DIR BINARIES... : the cached binaries into .tools/bin.
link() {
  local dir=$1; shift
  local b
  for b in "$@"; do ln -sfn "$dir/bin/$b" "$bin/$b"; done
}
