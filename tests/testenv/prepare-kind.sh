#!/usr/bin/env bash
# Build (once) and cache what the real kind cluster of tests/kind/test_kind_e2e.py needs, all on this machine
# (no image registry is reachable):
#
#   1. the kind CLI (gomod/kind: sigs.k8s.io/kind, from the Go module proxy) and nvidia-ctk (gomod/nvidiactk:
#      the tool that writes the NVIDIA runtime configuration into a GPU worker's containerd);
#   2. kubeadm, kubectl, kube-proxy and a version-stamped kubelet (gomod/kindnode, the pinned Kubernetes);
#   3. the images kubeadm expects (`kubeadm config images list`), made from the binaries prepare.sh builds,
#      plus kind's CNI (kindnode/manifests/default-cni.yaml), the training-operator and its init image;
#   4. the node image ($KIND_NODE_IMAGE): kind's base layout (images/base/files of the kind module) on the
#      harness's Debian rootfs, with those binaries and images (kindnode/Containerfile).
#
# Runs after prepare.sh's Go builds and prepare-node.sh (it needs their binaries and base images). Each part
# has a stamp (a hash of its inputs) under <cache>/<kubernetes version>/kind/ and is skipped when fresh: upgrading Kubernetes is
# the usual one version bump in versions.env plus gomod/gen_k8s_replace.py.
#
#   bash tests/testenv/prepare-kind.sh        # run by prepare.sh
#
# Environment: KUBETRAIN_TESTENV_CACHE (cache root), KUBETRAIN_TESTENV_KIND=0 (skip all of this).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"

log() { printf '[testenv:kind] %s\n' "$*" >&2; }
die() { printf '[testenv:kind] ERROR: %s\n' "$*" >&2; exit 1; }

CACHE_ROOT="${KUBETRAIN_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubetrain/testenv}"
BIN_DIR="$CACHE_ROOT/$KUBERNETES_VERSION/bin"
# Per Kubernetes version (kubeadm, kubectl, kubelet, kube-proxy and the stamps): a bump builds beside, never over,
# what other checkouts on this machine use. (tests/testenv/kindenv.py keeps the node's containerd root, an image
# cache, in the unversioned $CACHE_ROOT/kind.)
KIND_DIR="$CACHE_ROOT/$KUBERNETES_VERSION/kind"
KIND_BIN="$KIND_DIR/bin"
export CONTAINERS_CONF="$CACHE_ROOT/node/containers.conf"
KIND_NODE_IMAGE="$KIND_NODE_IMAGE_REPO:$KUBERNETES_VERSION"

[[ "${KUBETRAIN_TESTENV_KIND:-1}" == 0 ]] && { log "KUBETRAIN_TESTENV_KIND=0: skipped"; exit 0; }
[[ "${KUBETRAIN_TESTENV_NODE:-1}" == 0 ]] && { log "KUBETRAIN_TESTENV_NODE=0: skipped (the kind node needs it)"; exit 0; }
command -v podman >/dev/null || { log "SKIPPED: no podman (prepare-node.sh installs it as root)"; exit 0; }

stamp_ok() { [[ -f "$KIND_DIR/.$1.stamp" && "$(cat "$KIND_DIR/.$1.stamp")" == "$2" ]]; }
write_stamp() { printf '%s\n' "$2" >"$KIND_DIR/.$1.stamp"; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }
# A binary from prepare.sh: KUBETRAIN_TESTENV_BIN / KUBEBUILDER_ASSETS first (as prepare.sh), else the cache.
bin_of() {
  local d
  for d in "${KUBETRAIN_TESTENV_BIN:-}" "${KUBEBUILDER_ASSETS:-}" "$BIN_DIR"; do
    [[ -n "$d" && -x "$d/$1" ]] && { printf '%s\n' "$d/$1"; return 0; }
  done
  die "$1 not found in $BIN_DIR: run prepare.sh first"
}

# go_tools OUTDIR GOMODDIR STAMPNAME LDFLAGS PACKAGES...: build into OUTDIR unless the stamp matches.
go_tools() {
  local out="$1" dir="$2" name="$3" ldflags="$4"; shift 4
  local stamp; stamp="$(cat "$HERE/gomod/$dir/go.mod" "$HERE/gomod/$dir/go.sum" <(printf '%s' "$ldflags") | sha256sum | cut -c1-16)"
  if stamp_ok "$name" "$stamp"; then log "$name: up to date"; return 0; fi
  local start; start=$(date +%s)
  log "$name: building $*"
  # GOGC 400: as prepare.sh's builds (the compiler collects garbage less often; about 14 % less CPU)
  (cd "$HERE/gomod/$dir" && GOFLAGS="${GOFLAGS:-} -mod=readonly" GOGC="${GOGC:-400}" \
    go build -trimpath -buildvcs=false -ldflags="$ldflags" -o "$out/" "$@") || die "$name: go build failed"
  write_stamp "$name" "$stamp"
  log "$name: built in $(( $(date +%s) - start ))s"
}

k8s_ldflags() {  # as prepare.sh's ldflags_of: kubeadm compares its own version with the node's
  local v="${KUBERNETES_VERSION#v}" p=k8s.io/component-base/version
  printf '%s' "-s -w -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=${v%%.*} -X $p.gitMinor=$(cut -d. -f2 <<<"$v") -X $p.gitTreeState=clean"
}

module_dir() {  # where the pinned module $2 of gomod/$1 is unpacked
  (cd "$HERE/gomod/$1" && go mod download -json "$2") | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

# component_image REF BINARY-PATH NAME BASE: FROM BASE, the binary at /usr/local/bin/NAME (and /NAME, where
# upstream manifests run it: CoreDNS's Deployment runs /coredns, the training-operator's /manager).
component_image() {
  local ref="$1" binary="$2" name="$3" base="$4" ctx
  ctx="$(mktemp -d "$KIND_DIR/.img.XXXXXX")"
  cp "$binary" "$ctx/$name"
  printf 'FROM %s\nCOPY %s /usr/local/bin/%s\nCOPY %s /%s\nENTRYPOINT ["/%s"]\n' \
    "$base" "$name" "$name" "$name" "$name" "$name" >"$ctx/Containerfile"
  podman build -q --network none -t "$ref" "$ctx" >/dev/null || { rm -rf "$ctx"; die "image $ref: podman build failed"; }
  rm -rf "$ctx"
}

# The small bases of the component images: glibc only (the Go binaries here are cgo-linked), and Debian with
# iptables/iproute2 for kube-proxy and the CNI pods.
bases() {
  local ctx; ctx="$(mktemp -d "$KIND_DIR/.img.XXXXXX")"
  cat >"$ctx/Containerfile" <<EOF
FROM $PYTHON_IMAGE AS debian
FROM scratch
COPY --from=debian /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libresolv.so.2 /lib/x86_64-linux-gnu/
COPY --from=debian /lib64/ld-linux-x86-64.so.2 /lib64/
COPY --from=debian /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/
COPY --from=debian /etc/nsswitch.conf /etc/
ENV PATH=/usr/local/bin:/usr/bin:/bin
EOF
  podman build -q --network none -t "$KIND_GLIBC_IMAGE" "$ctx" >/dev/null || die "glibc base image: podman build failed"
  printf 'FROM %s\nRUN DEBIAN_FRONTEND=noninteractive apt-get update -q && apt-get install -y -q --no-install-recommends iptables conntrack iproute2 && rm -rf /var/lib/apt/lists/*\n' \
    "$PYTHON_IMAGE" >"$ctx/Containerfile"
  podman build -q -t "$KIND_NET_IMAGE" "$ctx" >/dev/null || die "iptables base image: podman build failed"
  rm -rf "$ctx"
}

images() {  # every image the node preloads, as one archive: $1/images/preload.tar
  local out="$1" refs=() ref bin
  bases
  while read -r ref; do
    case "$ref" in
      */kube-apiserver:*|*/kube-controller-manager:*|*/kube-scheduler:*)
        bin="${ref##*/}"; bin="${bin%%:*}"; component_image "$ref" "$(bin_of "$bin")" "$bin" "$KIND_GLIBC_IMAGE";;
      */kube-proxy:*) component_image "$ref" "$KIND_BIN/kube-proxy" kube-proxy "$KIND_NET_IMAGE";;
      */etcd:*) component_image "$ref" "$(bin_of etcd)" etcd "$KIND_GLIBC_IMAGE";;
      */coredns:*) component_image "$ref" "$(bin_of coredns)" coredns "$KIND_GLIBC_IMAGE";;
      */pause:*) podman tag "$PAUSE_IMAGE" "$ref";;
      *) die "kubeadm expects image $ref, which prepare-kind.sh does not know how to build";;
    esac
    refs+=("$ref")
  done < <("$KIND_BIN/kubeadm" config images list --kubernetes-version "$KUBERNETES_VERSION" 2>/dev/null)
  # kind's containerd config names its own sandbox image; the CNI pods run the kube-proxy image.
  podman tag "$PAUSE_IMAGE" "$KIND_SANDBOX_IMAGE" && refs+=("$KIND_SANDBOX_IMAGE")
  component_image "$KIND_OPERATOR_IMAGE" "$(bin_of training-operator)" manager "$KIND_GLIBC_IMAGE"
  refs+=("$KIND_OPERATOR_IMAGE")
  # The training-operator's PyTorchJob init container image (alpine:3.10 upstream): the harness's stand-in.
  podman tag "$INIT_IMAGE" "$KIND_INIT_IMAGE" && refs+=("$KIND_INIT_IMAGE")
  mkdir -p "$out/images"
  podman save -q --multi-image-archive -o "$out/images/preload.tar" "${refs[@]}" >&2
  printf '%s\n' "${refs[@]}" >"$out/images/preload.txt"
  grep '/kube-proxy:' "$out/images/preload.txt" >"$out/kube-proxy-image"
}

node_image() {
  local kind_src files=() stamp start ctx b
  kind_src="$(module_dir kind sigs.k8s.io/kind)"
  [[ -d "$kind_src/images/base/files" ]] || die "could not unpack sigs.k8s.io/kind $KIND_VERSION"
  mapfile -t files < <(find "$HERE/kindnode" "$kind_src/images/base/files" -type f | sort)
  # Every input, binaries included (hashing them takes a second or two).
  for b in kube-apiserver kube-controller-manager kube-scheduler etcd coredns training-operator; do
    files+=("$(bin_of "$b")")
  done
  stamp="$(hash_of "${files[@]}" "$HERE/versions.env" "$KIND_BIN"/{kubeadm,kubectl,kubelet,kube-proxy} \
    "$CACHE_ROOT/node/.pause.stamp" "$CACHE_ROOT/node/.init.stamp" "$CACHE_ROOT/node/.rootfs.stamp")"
  if stamp_ok node-image "$stamp" && podman image exists "$KIND_NODE_IMAGE"; then
    log "node image: up to date ($KIND_NODE_IMAGE)"; return 0
  fi
  start=$(date +%s)
  ctx="$(mktemp -d "$KIND_DIR/.node.XXXXXX")"
  cp -r "$kind_src/images/base/files" "$ctx/kind-files" && chmod -R u+w "$ctx/kind-files"
  cp -r "$HERE/kindnode/." "$ctx/"
  mkdir -p "$ctx/bin" && cp "$KIND_BIN"/{kubeadm,kubectl,kubelet,kube-proxy} "$ctx/bin/"
  printf '%s' "$KUBERNETES_VERSION" >"$ctx/version"
  images "$ctx"
  sed -i "s#KUBE_PROXY_IMAGE#$(cat "$ctx/kube-proxy-image")#" "$ctx/manifests/default-cni.yaml"
  podman image exists "$PYTHON_IMAGE" || podman import "$CACHE_ROOT/node/rootfs.tar" "$PYTHON_IMAGE" >&2
  log "node image: building $KIND_NODE_IMAGE"
  podman build -q --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" -t "$KIND_NODE_IMAGE" "$ctx" >&2 \
    || { rm -rf "$ctx"; die "node image: podman build failed"; }
  rm -rf "$ctx"
  write_stamp node-image "$stamp"
  log "node image: $KIND_NODE_IMAGE built in $(( $(date +%s) - start ))s"
}

# The training-operator's manifests (kubetrain cluster create --operator-manifests: GitHub is not reachable).
operator_manifests() {
  local src; src="$(module_dir operators github.com/kubeflow/training-operator)"
  [[ -d "$src/manifests/overlays/standalone" ]] || die "could not unpack the training-operator module"
  rm -rf "$KIND_DIR/training-operator" && mkdir -p "$KIND_DIR/training-operator"
  cp -r "$src/manifests" "$KIND_DIR/training-operator/" && chmod -R u+w "$KIND_DIR/training-operator"
}

main() {
  local start; start=$(date +%s)
  mkdir -p "$KIND_BIN"
  # kind mounts /lib/modules read-only into every node; a kernel without modules has no such directory and
  # podman then fails ("statfs /lib/modules: no such file or directory").
  [[ -d /lib/modules ]] || mkdir -p /lib/modules || die "cannot create /lib/modules (kind mounts it)"
  grep -q "sigs.k8s.io/kind $KIND_VERSION" "$HERE/gomod/kind/go.mod" || die "gomod/kind/go.mod does not pin $KIND_VERSION"
  grep -q "github.com/NVIDIA/nvidia-container-toolkit $NVIDIA_CTK_VERSION" "$HERE/gomod/nvidiactk/go.mod" \
    || die "gomod/nvidiactk/go.mod does not pin $NVIDIA_CTK_VERSION"
  grep -q "k8s.io/kubernetes $KUBERNETES_VERSION" "$HERE/gomod/kindnode/go.mod" \
    || die "gomod/kindnode/go.mod does not pin $KUBERNETES_VERSION (re-run gomod/gen_k8s_replace.py $KUBERNETES_VERSION kindnode)"
  go_tools "$KIND_BIN" kind kind "-s -w" sigs.k8s.io/kind
  # Not in $KIND_BIN, which the tests put on PATH: the host has no NVIDIA toolkit, and kubetrain looks for one.
  mkdir -p "$KIND_DIR/nvidia"
  go_tools "$KIND_DIR/nvidia" nvidiactk nvidiactk "-s -w" github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk
  go_tools "$KIND_BIN" kindnode kindnode "$(k8s_ldflags)" k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubelet
  node_image
  operator_manifests
  log "kind ready: $KIND_BIN/kind, node image $KIND_NODE_IMAGE ($(( $(date +%s) - start ))s)"
}

main "$@"
