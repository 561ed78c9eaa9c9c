#!/usr/bin/env bash
# make test-e2e-kind: the operator on a kind cluster (Kubernetes 1.37), running Crewlet's real
# engine. Needs a Docker engine; without one it says so and exits 2, running nothing.
#
# What runs on kind, honestly: the pytest suite under e2e/ is written against the project's local
# control plane (its fixtures, crewlet_operator/envtest/pytest_plugin.py, start their own etcd
# and kube-apiserver, and have no switch yet to point them at an existing cluster), so this script
# does not run pytest. It does on kind what a user does, with the real images, and checks it:
#
#   1. create a kind cluster from a Kubernetes 1.37 node image (KIND_NODE_IMAGE) and check its
#      minor;
#   2. build the operator's image from this checkout (make docker-build) and load it into kind;
#   3. install the chart (make helm-deploy), which installs the CRDs and waits for the manager;
#   4. resolve the engine image (ENGINE_IMAGE, default Crewlet's main) to a digest, log it on a line
#      beginning "Crewlet engine:" with the Crewlet commit it was built from, and create an
#      EngineClass running it and a Company;
#   5. check: the company is Accepted; the data and seats pods' engines started (their startup
#      probe, /health, passed: the image runs and accepted the crewlet.yaml the operator wrote,
#      since the engine refuses at start any setting it does not know) without restarting; the
#      company's Ready condition is True, or False with reason DataNotReady, which is what a data
#      pod reports until the company has its first revision (the engine answers /ready 503
#      "unconfigured" until then, and the operator does not write company documents); and the
#      company's NetworkPolicy admits its own pods to the broker's leaf port and nothing else
#      (kind's default CNI enforces NetworkPolicy since kind v0.24);
#   6. delete the cluster (KIND_KEEP_CLUSTER=1 keeps it, with its kubeconfig in .run/kind-e2e/).
#
# kubectl and helm are the project's (make bins); kind is built from the Go module proxy into
# ~/.cache/crewlet-operator/bin/tools, once, like hack/actionlint.sh builds actionlint.
set -euo pipefail
cd "$(dirname "$0")/.."

KIND_VERSION=${KIND_VERSION:-v0.33.0}
# kind v0.33.0's image for Kubernetes 1.37, by digest as kind's release notes ask.
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5}
KUBERNETES_MINOR=37
CLUSTER=${KIND_CLUSTER:-crewlet-e2e}
IMG=${IMG:-crewlet-operator:kind-e2e}
ENGINE_IMAGE=${ENGINE_IMAGE:-ghcr.io/crewlet/crewlet:main}
PROBE_IMAGE=${PROBE_IMAGE:-busybox:1.37}
TIMEOUT=${KIND_E2E_TIMEOUT:-600s}
NS=kind-e2e
OUTSIDER_NS=kind-e2e-outsider
COMPANY=acme
CACHE=${CREWLET_CACHE:-$HOME/.cache/crewlet-operator}
TOOLS=${CREWLET_TOOLS_DIR:-$CACHE/bin/tools}
WORK=${KIND_E2E_DIR:-.run/kind-e2e}

say() { printf 'kind-e2e: %s\n' "$*"; }
fail() { printf 'kind-e2e: FAILED: %s\n' "$*" >&2; exit 1; }

if ! command -v docker >/dev/null; then
  say "make test-e2e-kind needs Docker (the docker CLI and a running engine), for kind's nodes." >&2
  say "Not run. The e2e suite runs on the local control plane instead: make e2e (or make test)." >&2
  exit 2
fi
if ! docker info >/dev/null 2>&1; then
  say "no Docker engine answers (\`docker info\` failed): make test-e2e-kind needs one to run" >&2
  say "kind's nodes, and this machine has the docker CLI only. Not run. The e2e suite runs on" >&2
  say "the local control plane instead: make e2e (or make test)." >&2
  exit 2
fi

# --- tools ----------------------------------------------------------------------------------
KIND="$TOOLS/kind"
if ! { [ -x "$KIND" ] && out=$("$KIND" version 2>/dev/null) && grep -q -- "$KIND_VERSION" <<<"$out"; }; then
  say "building kind $KIND_VERSION into $TOOLS"
  mkdir -p "$TOOLS"
  CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$TOOLS" go install "sigs.k8s.io/kind@$KIND_VERSION"
fi
find_bin() { .venv/bin/python -c "from crewlet_operator.envtest.binaries import find; print(find('$1'))"; }
KUBECTL=$(find_bin kubectl)
mkdir -p "$WORK"
export KUBECONFIG="$PWD/$WORK/kubeconfig"
kubectl() { "$KUBECTL" "$@"; }

# --- the engine -----------------------------------------------------------------------------
if [[ "$ENGINE_IMAGE" == *@sha256:* ]]; then
  engine="$ENGINE_IMAGE"
else
  digest=$(docker buildx imagetools inspect "$ENGINE_IMAGE" --format '{{.Manifest.Digest}}')
  engine="${ENGINE_IMAGE%:*}@$digest"
fi
revision=$(docker buildx imagetools inspect "$engine" \
  --format '{{index (index .Image "linux/amd64").Config.Labels "org.opencontainers.image.revision"}}' || true)
echo "Crewlet engine: $engine (from $ENGINE_IMAGE; crewlet commit ${revision:-unknown: no org.opencontainers.image.revision label})"

# --- the cluster ----------------------------------------------------------------------------
cleanup() {
  local code=$?
  if [ "$code" -ne 0 ]; then
    say "diagnostics:"
    kubectl get engineclasses,companies,pods,statefulsets,pvc -A -o wide || true
    kubectl describe pods -n "$NS" || true
    kubectl logs -n crewlet-operator-system deploy/crewlet-operator-controller-manager --tail=100 || true
  fi
  if [ "${KIND_KEEP_CLUSTER:-0}" = 1 ]; then
    say "keeping the cluster $CLUSTER (KUBECONFIG=$KUBECONFIG); delete it with: $KIND delete cluster --name $CLUSTER"
  else
    "$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  exit "$code"
}
"$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
trap cleanup EXIT
say "creating the kind cluster $CLUSTER from $KIND_NODE_IMAGE"
"$KIND" create cluster --name "$CLUSTER" --image "$KIND_NODE_IMAGE" --kubeconfig "$KUBECONFIG" --wait 180s
server=$(kubectl version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')
echo "Kubernetes: $server (kind $KIND_VERSION)"
[[ "$server" == v1.$KUBERNETES_MINOR.* ]] || fail "the node image runs $server, not Kubernetes 1.$KUBERNETES_MINOR"
if [ -n "${GITHUB_OUTPUT:-}" ]; then
  { echo "kubernetes=$server"; echo "engine=$engine"; echo "engine-revision=$revision"; } >> "$GITHUB_OUTPUT"
fi

# --- the operator ---------------------------------------------------------------------------
say "building the operator's image $IMG and loading it into kind"
make --no-print-directory docker-build IMG="$IMG"
"$KIND" load docker-image "$IMG" --name "$CLUSTER"
say "installing the chart (make helm-deploy)"
make --no-print-directory helm-deploy IMG="$IMG"
kubectl wait --for condition=established --timeout=60s crd/companies.crewlet.ai crd/engineclasses.crewlet.ai

# --- a company ------------------------------------------------------------------------------
kubectl create namespace "$NS"
kubectl apply -f - <<EOF
apiVersion: crewlet.ai/v1alpha1
kind: EngineClass
metadata:
  name: kind-e2e
spec:
  engine:
    image: $engine
  storage:
    size: 12Gi
  seats:
    replicas: 1
---
apiVersion: crewlet.ai/v1alpha1
kind: Company
metadata:
  name: $COMPANY
  namespace: $NS
spec:
  className: kind-e2e
EOF

say "checking: Accepted"
kubectl wait "company/$COMPANY" -n "$NS" --for=condition=Accepted --timeout=120s
say "checking: the engines start (image pulled, crewlet.yaml accepted, /health answering)"
for pod in "$COMPANY-data-0" "$COMPANY-seats-0"; do
  kubectl wait "pod/$pod" -n "$NS" --for=create --timeout=120s
  kubectl wait "pod/$pod" -n "$NS" --for=jsonpath='{.status.containerStatuses[0].started}'=true --timeout="$TIMEOUT"
  restarts=$(kubectl get "pod/$pod" -n "$NS" -o jsonpath='{.status.containerStatuses[0].restartCount}')
  [ "$restarts" = 0 ] || fail "$pod restarted $restarts times"
done
say "checking: the Ready condition"
ready=""
for _ in $(seq 1 30); do
  ready=$(kubectl get "company/$COMPANY" -n "$NS" -o jsonpath='{range .status.conditions[?(@.type=="Ready")]}{.status}/{.reason}{end}')
  [ "$ready" = True/DataReady ] && break
  sleep 2
done
case "$ready" in
  True/DataReady) say "company Ready" ;;
  False/DataNotReady) say "company not Ready yet, reason DataNotReady: the engine withholds /ready until the company's first revision, which nobody gave it here" ;;
  *) fail "unexpected Ready condition $ready" ;;
esac

say "checking: the NetworkPolicy around the broker's leaf port"
leaf="$COMPANY-data-0.$COMPANY-data.$NS.svc:7422"
probe() { # namespace, labels, expected (open|closed)
  local out
  out=$(kubectl run "netpol-probe-$3" -n "$1" --labels="$2" --image="$PROBE_IMAGE" --restart=Never \
        --rm -i --quiet --command -- sh -c "if nc -z -w 5 ${leaf%:*} ${leaf##*:}; then echo open; else echo closed; fi" 2>&1 | tail -n1)
  [ "$out" = "$3" ] || fail "from namespace $1 with labels $2 the leaf port was '$out', expected $3"
  say "  from $1 ($2): $out, as expected"
}
kubectl create namespace "$OUTSIDER_NS"
probe "$NS" "app.kubernetes.io/name=crewlet,crewlet.ai/company=$COMPANY" open
probe "$OUTSIDER_NS" "app.kubernetes.io/name=crewlet,crewlet.ai/company=$COMPANY" closed
probe "$NS" "app=somebody-else" closed

kubectl get "company/$COMPANY" -n "$NS" -o wide
say "passed: the operator ran $engine on Kubernetes $server"
