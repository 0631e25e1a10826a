#!/usr/bin/env bash
# apiserver.sh stop|start: stops or (re)starts the harness's kube-apiserver with the command
# line up.sh recorded, waiting until it is ready.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${E2E_DIR:-$(cd "$here/../.." && pwd)/target/e2e}"
case "${1:-}" in
  stop)
    if [ -f "$dir/apiserver.pid" ]; then
      kill "$(cat "$dir/apiserver.pid")" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$(cat "$dir/apiserver.pid")" 2>/dev/null || break; sleep 0.1; done
      rm -f "$dir/apiserver.pid"
    fi
    ;;
  start)
    bash -c "exec $(cat "$dir/apiserver.cmd")" >> "$dir/apiserver.log" 2>&1 &
    echo $! > "$dir/apiserver.pid"
    server=$(grep -o 'secure-port=[0-9]*' "$dir/apiserver.cmd" | cut -d= -f2)
    for _ in $(seq 1 600); do
      if curl -sf --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" \
          "https://127.0.0.1:$server/readyz" >/dev/null 2>&1; then
        exit 0
      fi
      kill -0 "$(cat "$dir/apiserver.pid")" 2>/dev/null || { echo "kube-apiserver exited; see $dir/apiserver.log" >&2; tail -20 "$dir/apiserver.log" >&2; exit 1; }
      sleep 0.2
    done
    echo "kube-apiserver not ready after 120s; see $dir/apiserver.log" >&2
    exit 1
    ;;
  *) echo "usage: apiserver.sh stop|start" >&2; exit 2 ;;
esac
