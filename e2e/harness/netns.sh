#!/usr/bin/env bash
# netns.sh up|down: a network namespace for e2e backends (wharf-e2e, 198.18.0.2), reached
# from this host over a veth pair (198.18.0.1/24, the range RFC 2544 sets aside for
# benchmarks). The API server refuses loopback addresses in EndpointSlices; these are
# valid, and nothing leaves the machine. Needs root.
set -euo pipefail
ns=wharf-e2e
case "${1:-}" in
  up)
    "$0" down
    ip netns add "$ns"
    ip link add wharf-e2e0 type veth peer name wharf-e2e1
    ip link set wharf-e2e1 netns "$ns"
    ip addr add 198.18.0.1/24 dev wharf-e2e0
    ip link set wharf-e2e0 up
    ip netns exec "$ns" ip addr add 198.18.0.2/24 dev wharf-e2e1
    ip netns exec "$ns" ip link set wharf-e2e1 up
    ip netns exec "$ns" ip link set lo up
    ;;
  down)
    ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    ip link del wharf-e2e0 2>/dev/null || true
    ;;
  *) echo "usage: netns.sh up|down" >&2; exit 2 ;;
esac
