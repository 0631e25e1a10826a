#!/usr/bin/env bash
# istiod.sh stop|start: stops or (re)starts the harness's istiod (pilot-discovery, built by
# build-tools.sh) with the command line up.sh recorded, waiting until it is ready. istiod
# is the mesh CA of the e2e suite: it signs certificates for service-account tokens the
# harness API server issued (TokenReview) and publishes its root as the
# istio-ca-root-cert ConfigMap in every namespace.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${E2E_DIR:-$(cd "$here/../.." && pwd)/target/e2e}"
case "${1:-}" in
  stop)
    if [ -f "$dir/istiod.pid" ]; then
      kill "$(cat "$dir/istiod.pid")" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$(cat "$dir/istiod.pid")" 2>/dev/null || break; sleep 0.1; done
      rm -f "$dir/istiod.pid"
    fi
    ;;
  start)
    # Relative default paths (./etc/cacerts, ./var/lib/istio) resolve in its own directory.
    mkdir -p "$dir/istiod"
    (cd "$dir/istiod" && exec bash -c "exec $(cat "$dir/istiod.cmd")") >> "$dir/istiod.log" 2>&1 &
    echo $! > "$dir/istiod.pid"
    ready=$(grep -o 'httpAddr=[0-9.:]*' "$dir/istiod.cmd" | cut -d= -f2)
    for _ in $(seq 1 900); do
      if curl -sf "http://$ready/ready" >/dev/null 2>&1; then
        exit 0
      fi
      kill -0 "$(cat "$dir/istiod.pid")" 2>/dev/null || { echo "istiod exited; see $dir/istiod.log" >&2; tail -20 "$dir/istiod.log" >&2; exit 1; }
      sleep 0.2
    done
    echo "istiod not ready after 180s; see $dir/istiod.log" >&2
    exit 1
    ;;
  *) echo "usage: istiod.sh stop|start" >&2; exit 2 ;;
esac
