#!/usr/bin/env bash
# Stops what up.sh started.
here="$(cd "$(dirname "$0")" && pwd)"
dir="${E2E_DIR:-$(cd "$here/../.." && pwd)/target/e2e}"
"$here/apiserver.sh" stop || true
if [ -f "$dir/etcd.pid" ]; then kill "$(cat "$dir/etcd.pid")" 2>/dev/null || true; rm -f "$dir/etcd.pid"; fi
ip netns pids wharf-e2e 2>/dev/null | xargs -r kill 2>/dev/null || true
ip netns del wharf-e2e 2>/dev/null || true
ip link del wharf-e2e0 2>/dev/null || true
