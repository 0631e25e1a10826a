#!/usr/bin/env bash
# Copies the pinned Gateway API release's standard-channel CRDs from the upstream Go module
# into crds/gateway-api/. With --check, fails when the committed files differ (CI).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(cat "$here/GATEWAY_API_VERSION")"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
dir="$(cd /tmp && go mod download -json "sigs.k8s.io/gateway-api@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
[ -d "$dir/config/crd/standard" ] || { echo "no standard CRDs in sigs.k8s.io/gateway-api@$version" >&2; exit 1; }
if [ "${1:-}" = "--check" ]; then
  if ! diff -r "$dir/config/crd/standard" "$here/gateway-api" >/dev/null; then
    echo "crds/gateway-api differs from sigs.k8s.io/gateway-api@$version; run crds/sync.sh" >&2
    diff -r "$dir/config/crd/standard" "$here/gateway-api" | head -20 >&2
    exit 1
  fi
  echo "crds/gateway-api matches sigs.k8s.io/gateway-api@$version"
else
  rm -rf "$here/gateway-api"
  mkdir -p "$here/gateway-api"
  cp "$dir"/config/crd/standard/*.yaml "$here/gateway-api/"
  chmod 644 "$here"/gateway-api/*.yaml
  echo "copied $(ls "$here/gateway-api" | wc -l) files from sigs.k8s.io/gateway-api@$version"
fi
