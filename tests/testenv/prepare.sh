#!/usr/bin/env bash
# Build (once) and cache the binaries of the integration-test control plane:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, the
# Kubeflow training-operator and (optional) Kubeflow Trainer v2 + JobSet, at the
# versions pinned in versions.env and the go.mod/go.sum files under gomod/.
# Everything comes from the Go module proxy.
#
#   bash tests/testenv/prepare.sh          # what `make testenv` runs
#
# Idempotent: a component whose binaries exist and whose stamp (a hash of its
# pinned go.mod/go.sum) matches is not rebuilt, so a warm run takes seconds.
#
# Environment:
#   KUBETRAIN_TESTENV_CACHE  cache root (default: ${XDG_CACHE_HOME:-~/.cache}/kubetrain/testenv)
#   KUBETRAIN_TESTENV_BIN    a directory with prebuilt binaries; those found there are not built
#   KUBEBUILDER_ASSETS       likewise (usually holds etcd and kube-apiserver)
#   KUBETRAIN_TESTENV_TRAINER=0  skip the optional Trainer v2 + JobSet build
#   KUBETRAIN_TESTENV_KIND=0     skip the kind CLI and node image (prepare-kind.sh)
#   KUBETRAIN_TESTENV_DRA=0      skip the DRA example driver (its tests then skip, or fail under CI)
#   KUBETRAIN_TESTENV_NODE=0     skip the real node (kubelet, CoreDNS, containerd, images)
# Progress goes to stderr; the last stdout line is the binary directory.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"

log() { printf '[testenv] %s\n' "$*" >&2; }
die() { printf '[testenv] ERROR: %s\n' "$*" >&2; exit 1; }

CACHE_ROOT="${KUBETRAIN_TESTENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubetrain/testenv}"
BIN_DIR="$CACHE_ROOT/$KUBERNETES_VERSION/bin"

# component -> "gomod dir|packages|binaries" where a binary is "name" or "built-name:name"
declare -A SPEC=(
  [kubernetes]="kubernetes|k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler|kube-apiserver kube-controller-manager kube-scheduler"
  [etcd]="etcd|go.etcd.io/etcd/server/v3|server:etcd"
  # The four operators are one module (gomod/operators): one resolution of their dependencies, so the client
  # libraries they share (k8s.io/*, controller-runtime, gRPC, ...) are compiled once for all of them.
  [kwok]="operators|sigs.k8s.io/kwok/cmd/kwok|kwok"
  [training-operator]="operators|github.com/kubeflow/training-operator/cmd/training-operator.v1|training-operator.v1:training-operator"
  [trainer]="operators|github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager sigs.k8s.io/jobset|trainer-controller-manager jobset"
  # The real node (tests/testenv/node.py): kubelet from the same pinned Kubernetes version (its own module
  # dir, whose extra dependencies would otherwise change the stamp of the binaries above), CoreDNS with
  # the few plugins it needs (gomod/coredns/main.go).
  [kubelet]="kubelet|k8s.io/kubernetes/cmd/kubelet|kubelet"
  [coredns]="coredns|.|coredns"
  # Kueue (tests/testenv/kueue.py): the manager binary only.
  [kueue]="operators|sigs.k8s.io/kueue/cmd/kueue|kueue"
  # The DRA example driver's kubelet plugin (tests/testenv/dradriver.py).
  [draexample]="draexample|sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin|dra-example-kubeletplugin"
  # The real node's containerd, shim and ctr (Debian's 1.6 has no CDI, which DRA drivers' devices need).
  [containerd]="containerd|github.com/containerd/containerd/cmd/containerd github.com/containerd/containerd/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/cmd/ctr|containerd containerd-shim-runc-v2 ctr"
)
# Components kept outside $BIN_DIR: they do not depend on the Kubernetes version (tests/testenv/node.py finds
# containerd there).
declare -A OWN_BIN_DIR=([containerd]="$CACHE_ROOT/containerd-$CONTAINERD_VERSION/bin")
# Go build tags: btrfs needs its C headers, which the real node (overlayfs) does not use.
declare -A TAGS=([containerd]="no_btrfs")
ORDER=(etcd kwok training-operator kubernetes trainer)
# Set KUBETRAIN_TESTENV_TRAINER=0 to skip the optional Trainer v2 + JobSet build.
[[ "${KUBETRAIN_TESTENV_TRAINER:-1}" == 0 ]] && ORDER=(etcd kwok training-operator kubernetes)
# Set KUBETRAIN_TESTENV_KUEUE=0 to skip the Kueue build (tests/queues then skip, or fail under CI).
[[ "${KUBETRAIN_TESTENV_KUEUE:-1}" == 0 ]] || ORDER+=(kueue)
# Set KUBETRAIN_TESTENV_NODE=0 to skip the real node (kubelet, CoreDNS, containerd, images).
[[ "${KUBETRAIN_TESTENV_NODE:-1}" == 0 ]] || ORDER+=(kubelet coredns containerd)
# Set KUBETRAIN_TESTENV_DRA=0 to skip the DRA example driver (tests/jobs/test_dra_cluster.py).
[[ "${KUBETRAIN_TESTENV_DRA:-1}" == 0 ]] || ORDER+=(draexample)
MANIFESTS_DIR="$CACHE_ROOT/$KUBERNETES_VERSION/manifests"
# The Go compiler collects its garbage less often (GOGC 400 instead of 100): building etcd from an empty build
# cache took 14 % less CPU and wall time (2 interleaved pairs), and the largest Kubernetes package's compile peaks
# at 0.7 GB. Only the builds get it here (the harness sets its components' own: tests/testenv/processes.py).
BUILD_GOGC="${GOGC:-400}"

check_go() {
  command -v go >/dev/null 2>&1 || die "go is not on PATH; install Go >= 1.26 (the pinned modules need it)"
  local v; v="$(go env GOVERSION)"
  case "$v" in go1.2[6-9]*|go1.[3-9][0-9]*) ;; *) die "Go $v is too old; the pinned modules need go >= 1.26";; esac
}

check_pins() {
  # The go.mod files must pin what versions.env says (guards against drift).
  grep -q "k8s.io/kubernetes $KUBERNETES_VERSION" "$HERE/gomod/kubelet/go.mod" || die "gomod/kubelet/go.mod does not pin $KUBERNETES_VERSION (re-run gomod/gen_k8s_replace.py $KUBERNETES_VERSION kubelet)"
  grep -q "github.com/coredns/coredns $COREDNS_VERSION" "$HERE/gomod/coredns/go.mod" || die "gomod/coredns/go.mod does not pin $COREDNS_VERSION"
  grep -q "k8s.io/kubernetes $KUBERNETES_VERSION" "$HERE/gomod/kubernetes/go.mod" || die "gomod/kubernetes/go.mod does not pin $KUBERNETES_VERSION (re-run gomod/gen_k8s_replace.py)"
  grep -q "go.etcd.io/etcd/server/v3 $ETCD_VERSION" "$HERE/gomod/etcd/go.mod" || die "gomod/etcd/go.mod does not pin $ETCD_VERSION"
  grep -q "sigs.k8s.io/kwok $KWOK_VERSION" "$HERE/gomod/operators/go.mod" || die "gomod/operators/go.mod does not pin $KWOK_VERSION"
  grep -q "github.com/kubeflow/training-operator $TRAINING_OPERATOR_VERSION" "$HERE/gomod/operators/go.mod" || die "gomod/operators/go.mod does not pin $TRAINING_OPERATOR_VERSION"
  grep -q "github.com/kubeflow/trainer/v2 $TRAINER_VERSION" "$HERE/gomod/operators/go.mod" || die "gomod/operators/go.mod does not pin $TRAINER_VERSION"
  grep -q "sigs.k8s.io/jobset $JOBSET_VERSION" "$HERE/gomod/operators/go.mod" || die "gomod/operators/go.mod does not pin $JOBSET_VERSION"
  grep -q "sigs.k8s.io/kueue $KUEUE_VERSION" "$HERE/gomod/operators/go.mod" || die "gomod/operators/go.mod does not pin $KUEUE_VERSION"
  grep -q "sigs.k8s.io/dra-example-driver $DRA_EXAMPLE_DRIVER_VERSION" "$HERE/gomod/draexample/go.mod" || die "gomod/draexample/go.mod does not pin $DRA_EXAMPLE_DRIVER_VERSION"
  grep -q "github.com/containerd/containerd $CONTAINERD_VERSION" "$HERE/gomod/containerd/go.mod" || die "gomod/containerd/go.mod does not pin $CONTAINERD_VERSION"
}

# A component is rebuilt when its pinned go.mod/go.sum change (check_pins ties
# them to versions.env).
# (kubelet shares gomod/kubernetes but has its own stamp; coredns also hashes its main.go.)
stamp_of() {
  local dir="${SPEC[$1]%%|*}" f files=()
  files=("$HERE/gomod/$dir/go.mod" "$HERE/gomod/$dir/go.sum")
  for f in "$HERE/gomod/$dir"/*.go; do [[ -f "$f" ]] && files+=("$f"); done
  { cat "${files[@]}"; if [[ $1 == kubernetes ]]; then ldflags_of "$1"; fi
    if [[ -n "${TAGS[$1]:-}" ]]; then ldflags_of "$1"; echo "${TAGS[$1]}"; fi; } | sha256sum | cut -c1-16
}

# Kubernetes' own build (hack/lib/version.sh) stamps its version into k8s.io/component-base/version. Without
# it the apiserver's /version says "v0.0.0-master+$Format:%H$", which Kueue cannot parse (it exits at start).
# Part of the kubernetes stamp, so a cache built without it is relinked (the compiled packages are reused).
ldflags_of() {
  local flags='-s -w' v="${KUBERNETES_VERSION#v}" p=k8s.io/component-base/version
  if [[ $1 == kubernetes ]]; then
    flags+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=${v%%.*} -X $p.gitMinor=$(cut -d. -f2 <<<"$v")"
    flags+=" -X $p.gitTreeState=clean"
  fi
  # containerd reports this version to the kubelet (CRI Version) and in `containerd --version`.
  [[ $1 == containerd ]] && flags+=" -X github.com/containerd/containerd/version.Version=$CONTAINERD_VERSION"
  printf '%s' "$flags"
}

# Prints the directory that already provides binary $1 from the user, if any.
user_provided() {
  local d
  for d in "${KUBETRAIN_TESTENV_BIN:-}" "${KUBEBUILDER_ASSETS:-}"; do
    [[ -n "$d" && -x "$d/$1" ]] && { echo "$d"; return 0; }
  done
  return 1
}

# Upstream CRDs the harness installs for the trainer component, copied from the
# pinned modules in the Go module cache (the tests may read them; the product does not).
module_dir() {  # where the pinned module $2 of gomod/$1 is unpacked (downloads it if needed)
  (cd "$HERE/gomod/$1" && go mod download -json "$2") | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'
}

post_trainer() {
  check_go
  local trainer_dir jobset_dir
  trainer_dir="$(module_dir operators github.com/kubeflow/trainer/v2)"
  jobset_dir="$(module_dir operators sigs.k8s.io/jobset)"
  [[ -d "$trainer_dir" && -d "$jobset_dir" ]] || die "trainer: could not get the module sources of Trainer/JobSet"
  rm -rf "$MANIFESTS_DIR" && mkdir -p "$MANIFESTS_DIR/trainer" "$MANIFESTS_DIR/jobset"
  cp "$trainer_dir"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$MANIFESTS_DIR/trainer/"
  cp "$trainer_dir"/manifests/base/runtimes/torch_distributed.yaml "$MANIFESTS_DIR/trainer/"
  cp "$jobset_dir"/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml "$MANIFESTS_DIR/jobset/"
  chmod -R u+w "$MANIFESTS_DIR"
  log "trainer: CRDs copied to $MANIFESTS_DIR"
}

# The upstream CRDs the tests validate against (tests/testenv/reference.py checks
# them against kubetrain's sha256 pins), from the same pinned modules. Cheap: the
# modules are downloaded once (a few MB) and the copy is redone every run.
REFERENCE_DIR="$CACHE_ROOT/$KUBERNETES_VERSION/reference"
copy_reference() {
  check_go
  local op_dir trainer_dir tmp
  op_dir="$(module_dir operators "github.com/kubeflow/training-operator")"
  trainer_dir="$(module_dir operators github.com/kubeflow/trainer/v2)"
  [[ -d "$op_dir" && -d "$trainer_dir" ]] || die "reference: could not get the training-operator/Trainer module sources"
  tmp="$(mktemp -d "$CACHE_ROOT/$KUBERNETES_VERSION/.reference.XXXXXX")"
  mkdir -p "$tmp/kubeflow-training-operator-$TRAINING_OPERATOR_VERSION" "$tmp/kubeflow-trainer-$TRAINER_VERSION"
  cp "$op_dir/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" "$tmp/kubeflow-training-operator-$TRAINING_OPERATOR_VERSION/"
  cp "$trainer_dir"/manifests/base/crds/trainer.kubeflow.org_{trainjobs,clustertrainingruntimes,trainingruntimes}.yaml \
     "$trainer_dir/manifests/base/runtimes/torch_distributed.yaml" "$tmp/kubeflow-trainer-$TRAINER_VERSION/"
  chmod -R u+w "$tmp"
  rm -rf "$REFERENCE_DIR" && mv "$tmp" "$REFERENCE_DIR"
  log "reference: upstream CRDs copied to $REFERENCE_DIR"
}

# Kueue's CRDs and webhook configurations (config/components) from the same pinned module, beside (not in)
# $MANIFESTS_DIR, which post_trainer replaces whole.
KUEUE_MANIFESTS_DIR="$CACHE_ROOT/$KUBERNETES_VERSION/kueue-manifests"
post_kueue() {
  check_go
  local kueue_dir tmp
  kueue_dir="$(module_dir operators sigs.k8s.io/kueue)"
  [[ -d "$kueue_dir" ]] || die "kueue: could not get the module source of Kueue"
  tmp="$(mktemp -d "$CACHE_ROOT/$KUBERNETES_VERSION/.kueue-manifests.XXXXXX")"
  cp "$kueue_dir"/config/components/crd/bases/kueue.x-k8s.io_*.yaml "$kueue_dir"/config/components/webhook/manifests.yaml "$tmp/"
  chmod -R u+w "$tmp"
  rm -rf "$KUEUE_MANIFESTS_DIR" && mv "$tmp" "$KUEUE_MANIFESTS_DIR"
  log "kueue: CRDs and webhook manifests copied to $KUEUE_MANIFESTS_DIR"
}
post_kueue_done() { [[ -f "$KUEUE_MANIFESTS_DIR/manifests.yaml" ]]; }

post_trainer_done() { [[ -f "$MANIFESTS_DIR/jobset/jobset.x-k8s.io_jobsets.yaml" && -f "$MANIFESTS_DIR/trainer/torch_distributed.yaml" ]]; }

bin_dir_of() { printf '%s' "${OWN_BIN_DIR[$1]:-$BIN_DIR}"; }

is_fresh() {
  local comp="$1" bins="$2" b from_cache=0 dir
  dir="$(bin_dir_of "$comp")"
  for b in $bins; do
    b="${b##*:}"
    user_provided "$b" >/dev/null && continue
    from_cache=1
    [[ -x "$dir/$b" ]] || return 1
  done
  [[ $from_cache == 0 ]] && return 0
  [[ -f "$dir/.$comp.stamp" && "$(cat "$dir/.$comp.stamp")" == "$(stamp_of "$comp")" ]]
}

build() {
  local comp="$1" dir pkgs bins tmp start out
  IFS='|' read -r dir pkgs bins <<<"${SPEC[$comp]}"
  out="$(bin_dir_of "$comp")"
  if is_fresh "$comp" "$bins"; then
    log "$comp: up to date"
    if declare -F "post_$comp" >/dev/null && ! "post_${comp}_done"; then "post_$comp"; fi
    return 0
  fi
  check_go
  log "$comp: building $pkgs"
  start=$(date +%s)
  mkdir -p "$out"
  tmp="$(mktemp -d "$out/.build-$comp.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  # shellcheck disable=SC2086  # pkgs is a list
  if ! (cd "$HERE/gomod/$dir" && GOFLAGS="${GOFLAGS:-} -mod=readonly" GOGC="$BUILD_GOGC" \
        go build -trimpath -buildvcs=false -tags="${TAGS[$comp]:-}" -ldflags="$(ldflags_of "$comp")" -o "$tmp/" $pkgs); then
    rm -rf "$tmp"
    die "$comp: go build failed (see output above); the module proxy must be reachable for a cold build"
  fi
  for b in $bins; do mv -f "$tmp/${b%%:*}" "$out/${b##*:}"; done
  rm -rf "$tmp"
  trap - EXIT
  if declare -F "post_$comp" >/dev/null; then "post_$comp"; fi
  stamp_of "$comp" >"$out/.$comp.stamp"
  log "$comp: built in $(( $(date +%s) - start ))s"
}

# Downloads the modules of every component that will be built, all at once, while the first ones compile: each
# `go build` would otherwise fetch its own first, one after another (about 80 s and 3 GB on a cold machine). The
# builds wait on the module cache's own locks; a failed download here shows again, with its reason, in the build.
prefetch_modules() {
  local comp dir pkgs bins dirs=()
  for comp in "${ORDER[@]}"; do
    IFS='|' read -r dir pkgs bins <<<"${SPEC[$comp]}"
    is_fresh "$comp" "$bins" || [[ " ${dirs[*]} " == *" $dir "* ]] || dirs+=("$dir")
  done
  [[ ${#dirs[@]} == 0 ]] && return 0
  check_go
  log "downloading the modules of ${dirs[*]}"
  for dir in "${dirs[@]}"; do
    (cd "$HERE/gomod/$dir" && GOFLAGS="${GOFLAGS:-} -mod=readonly" go mod download) >/dev/null 2>&1 &
  done
  wait
}

main() {
  mkdir -p "$BIN_DIR"
  check_pins
  local total_start comp go_pid node_pid="" go_rc=0 node_rc=0 fetch_pid
  total_start=$(date +%s)
  prefetch_modules & fetch_pid=$!
  # The real node's packages and images (prepare-node.sh) need none of the Go builds: they wait on apt, the
  # disk and podman while the Go builds keep both cores busy, so a cold run prepares both at once.
  if [[ "${KUBETRAIN_TESTENV_NODE:-1}" != 0 ]]; then bash "$HERE/prepare-node.sh" >&2 & node_pid=$!; fi
  ( for comp in "${ORDER[@]}"; do build "$comp"; done; copy_reference ) & go_pid=$!
  wait "$go_pid" || go_rc=$?
  wait "$fetch_pid" || true
  [[ -z "$node_pid" ]] || wait "$node_pid" || node_rc=$?
  [[ $go_rc == 0 ]] || die "the Go builds failed (see above)"
  [[ $node_rc == 0 ]] || die "the real node's packages or images failed (see [testenv:node] above)"
  # The kind CLI and node image (tests/kind/test_kind_e2e.py) are made of both: they come last.
  bash "$HERE/prepare-kind.sh" >&2 || die "the kind node image failed (see [testenv:kind] above)"
  log "binaries ready in $BIN_DIR ($(( $(date +%s) - total_start ))s)"
  echo "$BIN_DIR"
}

main "$@"
