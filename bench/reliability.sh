#!/usr/bin/env bash
# Reliability figures for docs/reliability.md: the real `wharf` binary serving verifying
# HTTPS clients (8 keep-alive connections at 400 requests/s in total, plus 20 new
# connections/s) while
#   R1  its config changes 1,000 times (the served Ingress, its Secret, another Ingress),
#       each change waited for until live;
#   R2  its certificate is replaced every second for a minute;
#   R3  two replicas behind one address (a stand-in for a Service whose endpoints lag 1 s
#       behind SIGTERM, as the EndpointSlice controller and kube-proxy do) are restarted
#       one after the other, without and with the chart's 5 s shutdown delay;
#   R5  malformed objects are added one by one (bad PEM, a key of another certificate,
#       1 MiB of junk, an Opaque Secret, a missing Secret, an invalid host or annotation,
#       a missing port, a newer Ingress claiming the served host, 10,000 paths, a file
#       with invalid UTF-8): each must get one diagnostic while the rest keeps serving;
#   R4  `wharf controller` against a real API server (the e2e harness, started here in
#       its own directory) that is stopped for 60 s and started again; a change made
#       after it returns is timed until live; SIGTERM with the API server gone is timed
#       until exit.
# Every request that does not get a 200 from the right backend over a verified TLS
# connection counts as failed, by reason.
#
# Usage: bench/reliability.sh [--smoke]
# --smoke runs each scenario briefly with the debug build (CI runs it to check the script
# works; its numbers mean nothing).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
profile=release dir=release
if [ "${1:-}" = --smoke ]; then profile=dev dir=debug; fi
# The smoke run's debug build is the one the e2e suite uses (e2e/build.sh: no rebuild).
if [ "$profile" = dev ]; then
  e2e/build.sh >&2
else
  cargo build --profile "$profile" --locked -p wharf -p wharf-loadgen >&2
fi
run() { "target/$dir/wharf-loadgen" reliability --wharf "target/$dir/wharf" --work target/reliability "$@"; }
# R4 needs an API server: the e2e harness, in a directory of its own.
export E2E_DIR="$root/target/reliability-harness"
trap '"$root/e2e/harness/down.sh" >/dev/null 2>&1 || true' EXIT
"$root/e2e/harness/up.sh" > "$root/target/reliability-harness.log" 2>&1 ||
  { echo "API server harness failed; see target/reliability-harness.log" >&2; exit 1; }
# shellcheck disable=SC1091
. "$E2E_DIR/env"
if [ "$profile" = dev ]; then
  run api-server --down 2
  run changes --count 30
  run rotation --seconds 3
  run restart --flags=--shutdown-delay=2s
  run malformed
else
  run changes --count 1000
  run rotation --seconds 60
  run restart --lag-ms 1000 --flags=--shutdown-delay=0s
  run restart --lag-ms 1000 --flags=--shutdown-delay=5s
  run malformed
  run api-server --down 60
fi
