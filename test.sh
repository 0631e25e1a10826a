#!/usr/bin/env bash
# Runs every test: unit and table tests, in-process data-plane tests, and the standalone
# end-to-end tests against the real binary (curl and openssl s_client where installed).
set -euo pipefail
cd "$(dirname "$0")"
cargo test --workspace --locked "$@"
