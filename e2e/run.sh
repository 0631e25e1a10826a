#!/usr/bin/env bash
# Runs the e2e suite against a real etcd + kube-apiserver started on this machine (see
# e2e/README.md). Builds the upstream tools once per machine (cached).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"
"$here/build.sh"
"$here/harness/up.sh"
trap '"$here/harness/down.sh"' EXIT
# The gateway image from the Dockerfile, run by the suite as the chart's pod spec says.
"$here/image.sh" >> "${E2E_DIR:-$root/target/e2e}/env"
# shellcheck disable=SC1091
source "${E2E_DIR:-$root/target/e2e}/env"
export WHARF_BIN="$root/target/debug/wharf"
# The chart's renderings must be accepted by a real API server (up.sh installed the
# pinned Gateway API CRDs).
"$root/charts/check.sh" --server
# The suite's tests in the selection build.sh built (no recompilation); tests named as
# arguments (--test NAME) replace the whole suite.
suite=(--bin wharf-e2e-pods)
for t in "$here"/tests/*.rs; do
  name=$(basename "$t" .rs)
  [ "$name" = gateway_api_crds ] || suite+=(--test "$name")
done
case " $* " in *" --test "* | *" --bin "*) suite=() ;; esac
status=0
cargo test -p wharf -p wharf-e2e -p wharf-loadgen --locked --no-fail-fast "${suite[@]}" "$@" -- --test-threads 3 || status=$?
# gateway_api_crds deletes the Gateway API CRDs, which istiod's watch does not survive
# (it can panic on the deletion): it runs alone, after every test that needs istiod.
if [ ${#suite[@]} -gt 0 ]; then
  cargo test -p wharf -p wharf-e2e -p wharf-loadgen --locked --test gateway_api_crds "$@" || status=$?
fi
exit "$status"
