#!/usr/bin/env bash
# Prepare (once) and cache what the real kubelet node of the test control plane
# needs besides Go-built binaries (kubelet and CoreDNS are built by prepare.sh):
#
#   1. Debian packages: runc, the CNI plugins, podman, buildah,
#      debootstrap, iptables (apt-get, as root, only those missing).
#   2. The pause image, built on this machine (a static Go binary, FROM scratch).
#   3. The Python base image, a stand-in for the pytorch image that cannot be
#      pulled: a Debian bookworm minbase rootfs (debootstrap) with python3, and
#      torch copied into /opt/venv from the test virtualenv (same CPython ABI),
#      so torch is downloaded once per machine, by `make install`.
#
# Each step has its own stamp under <cache>/node/ and is skipped when fresh.
# Without root or off Linux it says what is missing and exits 0 (the e2e tests
# then skip locally and fail under CI=true); under CI=true it fails instead.
#
#   bash tests/testenv/prepare-node.sh       # run by prepare.sh
#
# Environment: KUBETRAIN_TESTENV_CACHE (cache root), KUBETRAIN_TESTENV_NODE=0 (skip all of this),
#              KUBETRAIN_PYTHON (the interpreter whose torch version and pip cache are used).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"

log() { printf '[testenv:node] %s\n' "$*" >&2; }
die() { printf '[testenv:node] ERROR: %s\n' "$*" >&2; exit 1; }
in_ci() { case "${CI:-}" in true|TRUE|True|1|yes) return 0;; *) return 1;; esac; }
unavailable() {  # a missing prerequisite: fatal under CI, a clear note otherwise
  if in_ci; then die "$* (CI=true: the real-node e2e tests need it)"; fi
  log "SKIPPED: $*; the e2e tests on the real node will be skipped"
  exit 0
}

CACHE_ROOT="${KUBETRAIN_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubetrain/testenv}"
NODE_DIR="$CACHE_ROOT/node"
PYTHON="${KUBETRAIN_PYTHON:-$REPO/.venv/bin/python}"
# (containerd itself is built by prepare.sh: Debian's 1.6 has no CDI.)
APT_PACKAGES=(runc containernetworking-plugins podman buildah debootstrap iptables)
# podman's default ulimits exceed this VM's hard limits (nofile 20000); see docs/testenv.md.
export CONTAINERS_CONF="$NODE_DIR/containers.conf"

[[ "${KUBETRAIN_TESTENV_NODE:-1}" == 0 ]] && { log "KUBETRAIN_TESTENV_NODE=0: skipped"; exit 0; }
[[ "$(uname -s)" == Linux ]] || unavailable "the real node needs Linux (this is $(uname -s))"
[[ "$(id -u)" == 0 ]] || unavailable "the real node needs root (containerd, kubelet, mounts, network namespaces)"

stamp_ok() { [[ -f "$NODE_DIR/.$1.stamp" && "$(cat "$NODE_DIR/.$1.stamp")" == "$2" ]]; }
write_stamp() { printf '%s\n' "$2" >"$NODE_DIR/.$1.stamp"; }

install_packages() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [[ ${#missing[@]} == 0 ]] && { log "packages: up to date"; return 0; }
  command -v apt-get >/dev/null || unavailable "missing ${missing[*]} and no apt-get to install them"
  log "packages: installing ${missing[*]}"
  local start; start=$(date +%s)
  DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  # No service is started: the harness runs its own containerd per session.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
  log "packages: installed in $(( $(date +%s) - start ))s"
}

write_containers_conf() {
  mkdir -p "$NODE_DIR"
  cat >"$CONTAINERS_CONF" <<EOF
# Written by tests/testenv/prepare-node.sh: keep build containers' rlimits at or
# below this machine's hard limits (podman's defaults are higher and fail here).
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
EOF
}

# local_image NAME REF STAMP FILL: build a small FROM-scratch image whose context FILL (a function taking
# the context dir) provides, and save it as <cache>/node/NAME.tar for the node's containerd to import.
local_image() {
  local name="$1" ref="$2" stamp="$3" fill="$4" tmp
  if stamp_ok "$name" "$stamp" && [[ -f "$NODE_DIR/$name.tar" ]]; then log "$name image: up to date"; return 0; fi
  tmp="$(mktemp -d "$NODE_DIR/.$name.XXXXXX")"
  "$fill" "$tmp"
  podman build -q --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" -t "$ref" "$tmp" >&2 \
    || { rm -rf "$tmp"; die "$name image: podman build failed"; }
  rm -f "$NODE_DIR/$name.tar"
  podman save --format oci-archive -o "$NODE_DIR/$name.tar" "$ref" >&2
  rm -rf "$tmp"
  write_stamp "$name" "$stamp"
  log "$name image: $ref"
}

pause_context() {  # a static pause binary (tests/testenv/pause)
  (cd "$HERE/pause" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$1/pause" .)
  cp "$HERE/pause/Containerfile" "$1/"
}

init_context() {  # the operator's init container: the Debian base with an nslookup (needs rootfs first)
  cp "$HERE/initimage/Containerfile" "$HERE/initimage/nslookup" "$1/"
  podman image exists "$PYTHON_IMAGE" || podman import "$NODE_DIR/rootfs.tar" "$PYTHON_IMAGE" >&2
}

rootfs() {  # Debian minbase + python3, as a tarball (the slow part: about 80 s)
  local stamp="bookworm-minbase-python3"
  if stamp_ok rootfs "$stamp" && [[ -f "$NODE_DIR/rootfs.tar" ]]; then log "rootfs: up to date"; return 0; fi
  local tmp start; tmp="$(mktemp -d "$NODE_DIR/.rootfs.XXXXXX")"; start=$(date +%s)
  log "rootfs: debootstrap bookworm (minbase, python3)"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$tmp/root" \
    http://deb.debian.org/debian >"$NODE_DIR/debootstrap.log" 2>&1 \
    || { tail -20 "$NODE_DIR/debootstrap.log" >&2; rm -rf "$tmp"; die "debootstrap failed"; }
  rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
  tar -C "$tmp/root" --numeric-owner -cf "$NODE_DIR/rootfs.tar" .
  rm -rf "$tmp"
  write_stamp rootfs "$stamp"
  log "rootfs: built in $(( $(date +%s) - start ))s ($(du -h "$NODE_DIR/rootfs.tar" | cut -f1))"
}

torch_version() { "$PYTHON" -P -c 'import importlib.metadata as m; print(m.version("torch"))'; }

base_image() {  # torch comes from the test virtualenv (`make install` downloaded it): never downloaded twice
  local version; version="$(torch_version)" || unavailable "no torch in $PYTHON (run \`make install\`)"
  local ref="$BASE_IMAGE_REPO:torch$version" site tmp start
  local cas=() f
  for f in /usr/local/share/ca-certificates/*.crt; do [[ -f "$f" ]] && cas+=("$f"); done
  local stamp; stamp="$(cat "$HERE/base/Containerfile" "$HERE/torch_packages.py" "$NODE_DIR/.rootfs.stamp" \
    ${cas[@]+"${cas[@]}"} | sha256sum | cut -c1-16)-$version"
  if stamp_ok base "$stamp" && podman image exists "$ref"; then log "base image: up to date ($ref)"; return 0; fi
  start=$(date +%s)
  site="$("$PYTHON" -P -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
  tmp="$(mktemp -d "$NODE_DIR/.base.XXXXXX")"
  cp "$HERE/base/Containerfile" "$tmp/"
  "$PYTHON" -P "$HERE/torch_packages.py" >"$tmp/torch-packages.txt"
  mkdir "$tmp/host-cas"
  [[ ${#cas[@]} == 0 ]] || cp "${cas[@]}" "$tmp/host-cas/"
  # (Re-importing the same rootfs gives the same image ID, so podman's layer cache still applies.)
  podman image exists "$PYTHON_IMAGE" || podman import "$NODE_DIR/rootfs.tar" "$PYTHON_IMAGE" >&2
  log "base image: copying torch $version from $site into $ref"
  podman build -q --network none -v "$site:/host-site:ro" --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" \
    -t "$ref" "$tmp" >&2 || { rm -rf "$tmp"; die "base image: podman build failed"; }
  rm -rf "$tmp"
  write_stamp base "$stamp"
  printf '%s\n' "$ref" >"$NODE_DIR/base-image"
  log "base image: $ref built in $(( $(date +%s) - start ))s"
}

main() {
  local start; start=$(date +%s)
  mkdir -p "$NODE_DIR"
  install_packages
  write_containers_conf
  local_image pause "$PAUSE_IMAGE" "$(cat "$HERE/pause/main.go" "$HERE/pause/Containerfile" | sha256sum | cut -c1-16)" \
    pause_context
  rootfs
  local_image init "$INIT_IMAGE" "$(cat "$HERE/initimage/Containerfile" "$HERE/initimage/nslookup" | sha256sum \
    | cut -c1-16)" init_context
  base_image
  log "node prerequisites ready in $NODE_DIR ($(( $(date +%s) - start ))s)"
}

main "$@"
