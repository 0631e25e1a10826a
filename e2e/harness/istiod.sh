#!/usr/bin/env bash
# istiod.sh stop|start: stops or (re)starts the harness's istiod (pilot-discovery, built by
# build-tools.sh) with the command line up.sh recorded, waiting until it is ready. istiod
# is the mesh CA of the e2e suite: it signs certificates for service-account tokens the
# harness API server issued (TokenReview) and publishes its root as the
# istio-ca-root-cert ConfigMap in every namespace.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${E2E_DIR:-$(cd "$here/../.." && pwd)/target/e2e}"
# shellcheck source=lib.sh
source "$here/lib.sh"
case "${1:-}" in
  stop) stop_pidfile "$dir/istiod.pid" ;;
  start)
    # Relative default paths (./etc/cacerts, ./var/lib/istio) resolve in its own directory.
    mkdir -p "$dir/istiod"
    (cd "$dir/istiod" && exec bash -c "exec $(cat "$dir/istiod.cmd")") >> "$dir/istiod.log" 2>&1 &
    echo $! > "$dir/istiod.pid"
    ready=$(grep -o 'httpAddr=[0-9.:]*' "$dir/istiod.cmd" | cut -d= -f2)
    wait_ready istiod "$dir/istiod.pid" "$dir/istiod.log" 900 "http://$ready/ready"
    ;;
  *) echo "usage: istiod.sh stop|start" >&2; exit 2 ;;
esac
