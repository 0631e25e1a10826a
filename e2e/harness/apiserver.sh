#!/usr/bin/env bash
# apiserver.sh stop|start: stops or (re)starts the harness's kube-apiserver with the command
# line up.sh recorded, waiting until it is ready.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${E2E_DIR:-$(cd "$here/../.." && pwd)/target/e2e}"
# shellcheck source=lib.sh
source "$here/lib.sh"
case "${1:-}" in
  stop) stop_pidfile "$dir/apiserver.pid" ;;
  start)
    bash -c "exec $(cat "$dir/apiserver.cmd")" >> "$dir/apiserver.log" 2>&1 &
    echo $! > "$dir/apiserver.pid"
    server=$(grep -o 'secure-port=[0-9]*' "$dir/apiserver.cmd" | cut -d= -f2)
    wait_ready kube-apiserver "$dir/apiserver.pid" "$dir/apiserver.log" 600 \
      --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" "https://127.0.0.1:$server/readyz"
    ;;
  *) echo "usage: apiserver.sh stop|start" >&2; exit 2 ;;
esac
