#!/usr/bin/env bash
# Stops what up.sh started.
here="$(cd "$(dirname "$0")" && pwd)"
dir="${E2E_DIR:-$(cd "$here/../.." && pwd)/target/e2e}"
"$here/istiod.sh" stop || true
"$here/apiserver.sh" stop || true
if [ -f "$dir/etcd.pid" ]; then kill "$(cat "$dir/etcd.pid")" 2>/dev/null || true; rm -f "$dir/etcd.pid"; fi
"$here/netns.sh" down
