#!/usr/bin/env bash
# Starts a real control plane on loopback, the way controller-runtime's envtest does: etcd
# and kube-apiserver (RBAC on) as local processes, built from Go modules by build-tools.sh.
# Also starts istiod as the mesh CA (istiod.sh). Writes into $E2E_DIR (default target/e2e):
#   admin.kubeconfig       cluster-admin (system:masters client certificate)
#   controller.kubeconfig  the token of ServiceAccount wharf-system/wharf, created with its
#                          RBAC by `helm install` of charts/wharf
#   env                    KUBECONFIG, WHARF_CONTROLLER_KUBECONFIG, PATH for kubectl
# Backends run in network namespace wharf-e2e at 198.18.0.2 (the API server refuses
# loopback endpoints). Stop it with down.sh; stop and start the API server alone with apiserver.sh stop|start.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dir="${E2E_DIR:-$root/target/e2e}"
tools="$("$here/build-tools.sh")"
mkdir -p "$dir"
"$here/down.sh" >/dev/null 2>&1 || true
rm -rf "$dir/etcd-data" "$dir/pki" "$dir"/*.log
mkdir -p "$dir/pki"
log() { echo "e2e: $*" >&2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
etcd_port=$(free_port); peer_port=$(free_port); api_port=$(free_port)

# Certificates and the service-account signing key, new every run.
pki="$dir/pki"
openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$pki/ca.key"
openssl req -x509 -new -key "$pki/ca.key" -days 2 -subj "/CN=wharf-e2e-ca" -out "$pki/ca.crt" 2>/dev/null
issue() { # name, subject, extensions
  openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$pki/$1.key"
  openssl req -new -key "$pki/$1.key" -subj "$2" -out "$pki/$1.csr" 2>/dev/null
  printf '%s\n' "$3" > "$pki/$1.ext"
  openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 2 -extfile "$pki/$1.ext" -out "$pki/$1.crt" 2>/dev/null
}
# 198.19.1.1: where pods of the gateway image reach it (e2e/image.sh, e2e/src/pod.rs).
issue apiserver "/CN=kube-apiserver" "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1,IP:198.19.1.1
extendedKeyUsage=serverAuth"
issue admin "/O=system:masters/CN=e2e-admin" "extendedKeyUsage=clientAuth"
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

log "starting etcd on 127.0.0.1:$etcd_port"
"$tools/etcd" --name e2e --data-dir "$dir/etcd-data" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "e2e=http://127.0.0.1:$peer_port" --log-level warn > "$dir/etcd.log" 2>&1 &
echo $! > "$dir/etcd.pid"

# The API server's command line is kept so apiserver.sh can restart it as it was.
cat > "$dir/apiserver.cmd" <<CMD
"$tools/kube-apiserver" --etcd-servers=http://127.0.0.1:$etcd_port \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$api_port \
  --tls-cert-file=$pki/apiserver.crt --tls-private-key-file=$pki/apiserver.key --client-ca-file=$pki/ca.crt \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file=$pki/sa.pub --service-account-signing-key-file=$pki/sa.key \
  --authorization-mode=Node,RBAC --service-cluster-ip-range=10.96.0.0/16 \
  --disable-admission-plugins=ServiceAccount --enable-priority-and-fairness=false \
  --cert-dir=$pki --v=1
CMD
"$here/apiserver.sh" start

kubeconfig() { # file, user entry
  cat > "$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $pki/ca.crt
users:
- name: user
  user:
$2
contexts:
- name: e2e
  context: {cluster: e2e, user: user}
current-context: e2e
KC
}
kubeconfig "$dir/admin.kubeconfig" "    client-certificate: $pki/admin.crt
    client-key: $pki/admin.key"
export KUBECONFIG="$dir/admin.kubeconfig"
kubectl() { "$tools/kubectl" "$@"; }

# The controller's identity: the chart, installed for real, creates the ServiceAccount and
# its least-privilege RBAC; the suite runs the controller with that ServiceAccount's token,
# so a rule missing from the chart fails the suite. (No kube-controller-manager runs here,
# so the chart's Deployment starts no pods.)
# The Gateway API CRDs Wharf serves (crds/, pinned); tests that need them absent remove them.
kubectl apply --server-side -f "$root/crds/gateway-api/" >/dev/null
# With an ACME issuer, so that the rules for writing certificate Secrets are the chart's
# too (the ACME tests run controllers with their own issuer flags, and apply the chart's
# Role for their own namespace); the edge Gateway open to routes of every namespace, as the
# suite's tests attach theirs from their own.
"$tools/helm" install wharf "$root/charts/wharf" -n wharf-system --create-namespace \
  --set 'controller.acme.issuers[0].name=e2e' --set 'controller.acme.issuers[0].directory=https://acme.invalid/dir' \
  --set 'controller.acme.namespaces[0]=wharf-system' --set gateway.allowedRoutes=All >&2
token=$(kubectl create token wharf -n wharf-system --duration=24h)
kubeconfig "$dir/controller.kubeconfig" "    token: $token"

# istiod as the mesh CA, on loopback ports of its own. Its serving certificate also names
# localhost, so the gateway reaches it as https://localhost:PORT and verifies it by name.
kubectl create namespace istio-system >/dev/null
kubectl apply --server-side -f "$tools/istio-crds.yaml" >/dev/null
istiod_grpc=$(free_port)
cat > "$dir/istiod.cmd" <<CMD
env POD_NAMESPACE=istio-system ISTIOD_CUSTOM_HOST=localhost INJECT_ENABLED=false \
  INJECTION_WEBHOOK_CONFIG_NAME= VALIDATION_WEBHOOK_CONFIG_NAME= ENABLE_LEADER_ELECTION=false \
  PILOT_ENABLE_IP_AUTOALLOCATE=false \
  "$tools/pilot-discovery" discovery --kubeconfig=$dir/admin.kubeconfig \
  --httpAddr=127.0.0.1:$(free_port) --httpsAddr=127.0.0.1:$(free_port) --grpcAddr=127.0.0.1:$(free_port) \
  --secureGRPCAddr=127.0.0.1:$istiod_grpc --monitoringAddr=127.0.0.1:$(free_port) \
  --ctrlz_address=127.0.0.1 --ctrlz_port=0 --log_output_level=default:warn
CMD
log "starting istiod (mesh CA on 127.0.0.1:$istiod_grpc)"
"$here/istiod.sh" start

# The API server refuses loopback addresses in EndpointSlices: backends live in a network
# namespace of our own.
"$here/netns.sh" up
netns=wharf-e2e

cat > "$dir/env" <<ENV
export KUBECONFIG=$dir/admin.kubeconfig
export WHARF_CONTROLLER_KUBECONFIG=$dir/controller.kubeconfig
export WHARF_E2E_HARNESS=$here
export E2E_DIR=$dir
export WHARF_E2E_BACKEND_IP=198.18.0.2
export WHARF_E2E_HOST_IP=198.18.0.1
export WHARF_E2E_BACKEND_EXEC="ip netns exec $netns"
export WHARF_E2E_ISTIOD_ADDRESS=https://localhost:$istiod_grpc
export PATH=$tools:\$PATH
ENV
log "control plane up: https://127.0.0.1:$api_port (source $dir/env)"
