#!/usr/bin/env bash
# Runs every test: unit and table tests, in-process data-plane tests, the standalone
# end-to-end tests of the real binary (curl and openssl s_client), and the controller e2e
# suite against a real etcd + kube-apiserver started on this machine (e2e/run.sh; the
# first run builds those from Go modules, later runs reuse the cache).
set -euo pipefail
cd "$(dirname "$0")"
cargo test --locked "$@"
e2e/run.sh
