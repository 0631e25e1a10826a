#!/usr/bin/env bash
# Runs every test: unit and table tests, in-process data-plane tests, the standalone
# end-to-end tests of the real binary (curl and openssl s_client), and the controller e2e
# suite against a real etcd + kube-apiserver started on this machine (e2e/run.sh; the
# first run builds those from Go modules, later runs reuse the cache), then the Gateway
# API conformance suite on the same kind of harness (e2e/conformance.sh, which rewrites
# conformance/reports/). Ends with one summary line over everything.
set -euo pipefail
cd "$(dirname "$0")"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
{ cargo test --locked "$@" && e2e/run.sh && e2e/conformance.sh; } 2>&1 | tee "$log" || status=$?
passed=$(grep -o 'test result: [a-zA-Z]*\. [0-9]* passed' "$log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -o '; [0-9]* failed' "$log" | awk '{s+=$2} END {print s+0}')
echo "$passed passed, $failed failed"
exit "$status"
