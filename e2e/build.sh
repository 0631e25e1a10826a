#!/usr/bin/env bash
# Builds what the e2e suite, the conformance run and the benchmarks' smoke runs use: the
# wharf, wharf-e2e-pods and wharf-loadgen binaries with the e2e tests, as one cargo
# selection. Cargo resolves features per selection, so each script building its own
# subset would compile most dependencies again; asking for the same set reuses the build.
# Extra arguments go to cargo (e.g. --profile release).
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo build -p wharf -p wharf-e2e -p wharf-loadgen --all-targets --locked "$@"
