#!/usr/bin/env bash
# Runs the Gateway API conformance suite (sigs.k8s.io/gateway-api/conformance, the version
# crds/GATEWAY_API_VERSION pins, built by harness/build-tools.sh) against `wharf controller`
# on the harness API server, and writes the suite's own report to
# conformance/reports/<version>/wharf.yaml.
#
# The suite applies Deployments of its echo server and sends requests to each Gateway's
# status address, so next to etcd and kube-apiserver (harness/up.sh) this runs
# kube-controller-manager (Deployments, ReplicaSets, EndpointSlices, service accounts,
# namespaces, garbage collection; no node lifecycle), and wharf-e2e-pods in place of a
# kubelet: it registers a Node, binds the suite's pods and runs each echo server in a
# network namespace of its own (198.18.64.0/18 on bridge wharfpods0), and serves their
# logs to the API server as a kubelet does (the mirror tests read them). Wharf binds each
# Gateway on an address of 127.103.0.0/16, which the suite reaches directly.
#
# Extra arguments go to the suite (e.g. --run-test HTTPRouteSimpleSameNamespace, --debug).
# Needs root (network namespaces), like the rest of the harness.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
dir="${E2E_DIR:-$root/target/e2e}"
version="$(cat "$root/crds/GATEWAY_API_VERSION")"
report="$root/conformance/reports/$version/wharf.yaml"
# The suite reads the features to test from GatewayClass.status.supportedFeatures, which
# Wharf fills from translate::gateway::SUPPORTED_FEATURES: nothing is skipped by a flag here.
profiles="GATEWAY-HTTP,GATEWAY-GRPC,GATEWAY-TLS,GATEWAY-TCP"
log() { echo "conformance: $*" >&2; }

cd "$root"
"$here/build.sh"
tools="$("$here/harness/build-tools.sh")"
"$here/harness/up.sh"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The pod runner stops its pods on SIGTERM; this is for one that could not.
  for ns in $(ip netns list | awk '/^wp[0-9]+/ {print $1}'); do
    ip netns pids "$ns" | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del wharfpods0 2>/dev/null || true
  "$here/harness/down.sh"
}
trap cleanup EXIT
# shellcheck disable=SC1091
source "$dir/env"

log "starting kube-controller-manager"
"$tools/kube-controller-manager" --kubeconfig="$dir/admin.kubeconfig" \
  --controllers=deployment-controller,replicaset-controller,endpointslice-controller,serviceaccount-controller,serviceaccount-token-controller,namespace-controller,garbage-collector-controller,pod-garbage-collector-controller,root-ca-certificate-publisher-controller \
  --leader-elect=false --use-service-account-credentials=false \
  --root-ca-file="$dir/pki/ca.crt" --service-account-private-key-file="$dir/pki/sa.key" \
  --bind-address=127.0.0.1 --secure-port=0 --v=1 > "$dir/kube-controller-manager.log" 2>&1 &
pids+=($!)

log "starting the pod runner"
target/debug/wharf-e2e-pods --image "echo-basic=$tools/echo-basic-$version" --ready-only coredns \
  --state-dir "$dir/pods" > "$dir/pods.log" 2>&1 &
pids+=($!)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
admin_port=$(free_port)
log "starting wharf controller (admin on 127.0.0.1:$admin_port)"
RUST_LOG=info,wharf::access=off target/debug/wharf controller --kubeconfig "$WHARF_CONTROLLER_KUBECONFIG" \
  --listen-address 127.0.0.1 --http-port 0 --https-port 0 --passthrough-port 0 --admin-port "$admin_port" \
  --gateway-addresses 127.103.0.0/16 \
  --election-namespace wharf-system --election-id conformance --pod-name conformance-0 \
  --drain-timeout 2s --shutdown-delay 0s > "$dir/wharf-conformance.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 150); do curl -sf "http://127.0.0.1:$admin_port/healthz/ready" >/dev/null && break; sleep 0.2; done

# The class under test is the chart's GatewayClass `wharf`, which the harness's helm
# install created. The suite reads supportedFeatures once, at its start: wait for Wharf
# to accept the class.
kubectl wait gatewayclass/wharf --for=condition=Accepted --timeout=60s >/dev/null

mkdir -p "$(dirname "$report")"
rm -f "$report"
log "running the suite: $profiles"
status=0
"$tools/gateway-conformance-$version.test" -test.run TestConformance -test.timeout 30m -test.v \
  --gateway-class wharf --conformance-profiles "$profiles" \
  --organization wharf --project wharf --url https://github.com/wharf-gateway/wharf \
  --version "$(sed -n 's/^version = "\(.*\)"/v\1/p' "$root/Cargo.toml" | head -1)" --contact https://github.com/wharf-gateway/wharf/issues \
  --report-output "$report" "$@" 2>&1 | tee "$dir/conformance.log" || status=$?
grep -E '^(--- FAIL|--- PASS|FAIL|ok|PASS)' "$dir/conformance.log" | tail -5 >&2 || true
log "report: $report"
exit "$status"
