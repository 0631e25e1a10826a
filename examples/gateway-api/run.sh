#!/usr/bin/env bash
# Runs the Gateway API example: the quickstart's backends and certificates, and the
# GatewayClass, Gateway and HTTPRoutes in this folder. Ctrl-C stops everything.
#
# Needs: cargo, openssl. Ports: 18080 and 18443 on 127.0.0.1 (the Gateway), 8080, 8443,
# 15443 and 15021 (Wharf's edge and admin listeners), 9001-9002 (backends).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${QUICKSTART_DIR:-$root/target/quickstart}"
mkdir -p "$out"

if [ -z "${WHARF_BIN:-}" ]; then
  cargo build --release -p wharf --manifest-path "$root/Cargo.toml"
  WHARF_BIN="$root/target/release/wharf"
fi

"$root/examples/quickstart/gen-certs.sh" "$out"

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
"$WHARF_BIN" echo --listen 127.0.0.1:9001 --name web & pids+=($!)
"$WHARF_BIN" echo --listen 127.0.0.1:9002 --name api & pids+=($!)

cat <<MSG

Wharf Gateway API example. Try, in another terminal:
  curl -H 'Host: shop.example.com' http://127.0.0.1:18080/api/orders   # api, sees /orders and x-gateway
  curl -H 'Host: shop.example.com' http://127.0.0.1:18080/             # web
  curl -i -H 'Host: old.example.com' http://127.0.0.1:18080/cart       # 301 to shop.example.com
  curl --cacert $out/ca.crt --resolve shop.example.com:18443:127.0.0.1 https://shop.example.com:18443/api
  curl http://127.0.0.1:15021/debug/config                             # the Gateway's ports

MSG
exec "$WHARF_BIN" run -f "$here" -f "$root/examples/quickstart/10-backends.yaml" -f "$out/secrets.yaml" \
  --gateway-addresses 127.0.0.0/8 "$@"
