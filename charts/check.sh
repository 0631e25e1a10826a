#!/usr/bin/env bash
# Checks the chart: helm lint; helm template for the defaults and every examples/*.yaml;
# values.schema.json refuses bad values; with --server, every rendering is applied to the
# API server in KUBECONFIG with a server-side dry run (the API server validates it all),
# after creating the namespaces the renderings name that the server lacks.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
tools="$("$root/e2e/harness/build-tools.sh")"
helm="$tools/helm"
chart="$here/wharf"
out="$root/target/chart-render"
mkdir -p "$out"
kube_version="${KUBE_VERSION:-1.35.4}"
# Render as on a cluster with the Gateway API CRDs installed (the GatewayClass and Gateway
# are rendered only there).
gateway_api="gateway.networking.k8s.io/v1/Gateway"

"$helm" lint --strict "$chart" --kube-version "$kube_version"
renders=()
for values in "" "$chart"/examples/*.yaml; do
  name=$(basename "${values:-default.yaml}" .yaml)
  "$helm" template wharf "$chart" -n wharf-system --kube-version "$kube_version" --api-versions "$gateway_api" \
    ${values:+-f "$values"} > "$out/$name.yaml"
  renders+=("$out/$name.yaml")
  echo "rendered $name: $(grep -c '^kind:' "$out/$name.yaml") objects"
done

# The schema must refuse what would break at run time.
for bad in replicaCount=-1 service.type=External controller.logFormat=xml unknownKey=1 \
    controller.connectTimeout=5 tcpService=db:5432 ingressClass.controllerName=nope \
    mesh.enabled=true,mesh.source=secret mesh.source=spire gateway.allowedRoutes=Everyone \
    gateway.certificateRefs=ns/name gatewayClass.controllerName=nope controller.proxyProtocol=true \
    'controller.acme.issuers[0].name=a,controller.acme.issuers[0].directory=https://a.test/d'; do
  if "$helm" template wharf "$chart" --kube-version "$kube_version" --set "$bad" >/dev/null 2>&1; then
    echo "values.schema.json accepted $bad" >&2
    exit 1
  fi
done
echo "schema refuses bad values"

# Every value the schema knows is documented.
python3 - "$chart/values.schema.json" "$root/docs/chart.md" <<'PY'
import json, sys
schema, doc = json.load(open(sys.argv[1])), open(sys.argv[2]).read()
paths = []
def walk(prefix, node):
    props = node.get("properties")
    if props and node.get("additionalProperties") is False:
        for k, v in props.items():
            walk(prefix + [k], v)
    else:
        paths.append(".".join(prefix))
walk([], schema)
missing = [p for p in paths if f"| `{p}` |" not in doc]
if missing:
    sys.exit("docs/chart.md does not document: " + ", ".join(missing))
print(f"docs/chart.md documents all {len(paths)} values")
PY

if [ "${1:-}" = "--server" ]; then
  for r in "${renders[@]}"; do
    # ServiceMonitor needs the Prometheus Operator's CRD, which this API server lacks.
    python3 - "$r" > "$r.server" <<'PY'
import sys
docs = open(sys.argv[1]).read().split("\n---\n")
print("\n---\n".join(d for d in docs if "kind: ServiceMonitor" not in d))
PY
    # Objects in the namespaces the values name (ACME's Roles) need those namespaces to
    # exist, as they would on a cluster; the dry run creates nothing else.
    for ns in $(sed -n 's/^  namespace: *"\{0,1\}\([a-z0-9-]*\)"\{0,1\}$/\1/p' "$r.server" | sort -u); do
      kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null
    done
    kubectl apply --dry-run=server -f "$r.server" >/dev/null
    echo "server-side dry run of $(basename "$r") passed"
  done
fi
