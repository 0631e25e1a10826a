#!/usr/bin/env bash
# The e2e suite on kind, for a machine with Docker. Needs: docker, kind, kubectl, helm,
# cargo, openssl, curl, and root (or sudo) for the backends' network namespace.
#
# 1. Creates a kind cluster with host ports 80, 443, 15443 and 31400 mapped to the
#    gateway's node ports, builds the image and loads it, and installs the chart.
# 2. Smoke test through the real gateway pod: an echo backend pod, a TLS Secret and an
#    Ingress; curl reaches it by SNI on https://echo.kind.test, `kubectl get ingress`
#    shows the ADDRESS.
# 3. Runs the e2e suite against the cluster, with the controller using the chart's
#    ServiceAccount token (the API-server restart test needs the local harness and is
#    left out).
#
# 4. With ISTIO=1 (needs istioctl on PATH): installs Istio ambient, enrols the echo pods,
#    switches the gateway's mesh identity to the Istio CA and checks that echo.kind.test
#    is now served over HBONE through the real ztunnel.
#
# KIND_CLUSTER names the cluster (default wharf); KEEP=1 keeps it afterwards.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cluster="${KIND_CLUSTER:-wharf}"
work="$root/target/kind"
mkdir -p "$work"
cd "$root"

kind create cluster --name "$cluster" --config - <<'CFG'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
    extraPortMappings:
      - {containerPort: 30080, hostPort: 80}
      - {containerPort: 30443, hostPort: 443}
      - {containerPort: 31443, hostPort: 15443}
      - {containerPort: 31400, hostPort: 31400}
CFG
[ "${KEEP:-}" = 1 ] || trap 'kind delete cluster --name "$cluster"; "$here/harness/netns.sh" down' EXIT
export KUBECONFIG="$work/kubeconfig"
kind get kubeconfig --name "$cluster" > "$KUBECONFIG"

docker build -t wharf:dev .
kind load docker-image wharf:dev --name "$cluster"
kubectl apply --server-side -f crds/gateway-api/
helm install wharf charts/wharf -n wharf-system --create-namespace -f charts/wharf/examples/kind.yaml --wait --timeout 3m

# Smoke test through the gateway pod.
kubectl apply -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      containers:
        - name: echo
          image: wharf:dev
          imagePullPolicy: Never
          args: [echo, --listen, "0.0.0.0:8080", --name, echo]
          ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  selector: {app: echo}
  ports: [{name: http, port: 80, targetPort: 8080}]
YAML
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -subj /CN=echo.kind.test -addext subjectAltName=DNS:echo.kind.test \
  -keyout "$work/echo.key" -out "$work/echo.crt" 2>/dev/null
kubectl create secret tls echo-tls --cert "$work/echo.crt" --key "$work/echo.key" --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f - <<'YAML'
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: echo, namespace: default}
spec:
  ingressClassName: wharf
  tls: [{hosts: [echo.kind.test], secretName: echo-tls}]
  rules:
    - host: echo.kind.test
      http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: echo, port: {number: 80}}}}]}
YAML
kubectl rollout status deployment/echo --timeout 2m
for _ in $(seq 1 60); do
  if curl -sf --cacert "$work/echo.crt" --resolve echo.kind.test:443:127.0.0.1 https://echo.kind.test/ | grep -q '"name":"echo"'; then
    ok=1; break
  fi
  sleep 1
done
[ "${ok:-}" = 1 ] || { echo "smoke test: echo.kind.test not served" >&2; kubectl logs -n wharf-system deploy/wharf >&2; exit 1; }
kubectl get ingress echo | grep -q 127.0.0.1 || { echo "smoke test: no ADDRESS on the Ingress" >&2; exit 1; }
echo "smoke test passed: SNI, routing to pods and status through the gateway pod"

if [ "${ISTIO:-}" = 1 ]; then
  command -v istioctl >/dev/null || { echo "ISTIO=1 needs istioctl on PATH" >&2; exit 1; }
  istioctl install --set profile=ambient --skip-confirmation
  kubectl label namespace default istio.io/dataplane-mode=ambient --overwrite
  helm upgrade wharf charts/wharf -n wharf-system -f charts/wharf/examples/kind.yaml \
    --set mesh.enabled=true --set mesh.source=istio --wait --timeout 3m
  kubectl port-forward -n wharf-system svc/wharf-admin 15021 >/dev/null 2>&1 &
  pf=$!
  ok=
  for _ in $(seq 1 60); do
    curl -sf --cacert "$work/echo.crt" --resolve echo.kind.test:443:127.0.0.1 https://echo.kind.test/ | grep -q '"name":"echo"' || { sleep 1; continue; }
    tunnels=$(curl -s localhost:15021/metrics | awk '/^wharf_hbone_tunnels_total\{direction="outbound",result="ok"\}/ {print $2}')
    [ "${tunnels:-0}" != 0 ] && { ok=1; break; }
    sleep 1
  done
  kill "$pf" 2>/dev/null || true
  [ "$ok" = 1 ] || { echo "ambient: echo.kind.test not served over HBONE" >&2; kubectl logs -n wharf-system deploy/wharf >&2; exit 1; }
  echo "ambient passed: served over HBONE through ztunnel with a certificate from istiod"
fi

# The suite, as on the local harness.
"$here/harness/netns.sh" up
token=$(kubectl create token wharf -n wharf-system --duration=2h)
server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d > "$work/ca.crt"
cat > "$work/controller.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: kind, cluster: {server: "$server", certificate-authority: "$work/ca.crt"}}]
users: [{name: wharf, user: {token: "$token"}}]
contexts: [{name: kind, context: {cluster: kind, user: wharf}}]
current-context: kind
KC
"$root/e2e/build.sh"
export WHARF_CONTROLLER_KUBECONFIG="$work/controller.kubeconfig" WHARF_BIN="$root/target/debug/wharf"
export WHARF_E2E_BACKEND_IP=198.18.0.2 WHARF_E2E_BACKEND_EXEC="ip netns exec wharf-e2e"
cargo test -p wharf -p wharf-e2e -p wharf-loadgen --locked --no-fail-fast --test controller --test replicas -- --test-threads 3
