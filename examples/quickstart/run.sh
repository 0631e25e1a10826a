#!/usr/bin/env bash
# Starts the quickstart: makes a test CA and certificates, starts the backends, and runs
# Wharf on the manifests in this folder. Ctrl-C stops everything.
#
# Needs: cargo, openssl. Ports: 8080 (HTTP), 8443 (HTTPS), 15443 (passthrough),
# 31400 (TCP), 15021 (admin), 9001-9003 and 9443 (backends), all on this machine.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${QUICKSTART_DIR:-$root/target/quickstart}"
mkdir -p "$out"

if [ -z "${WHARF_BIN:-}" ]; then
  cargo build --release -p wharf --manifest-path "$root/Cargo.toml"
  WHARF_BIN="$root/target/release/wharf"
fi

"$here/gen-certs.sh" "$out"

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
"$WHARF_BIN" echo --listen 127.0.0.1:9001 --name web & pids+=($!)
"$WHARF_BIN" echo --listen 127.0.0.1:9002 --name api & pids+=($!)
"$WHARF_BIN" echo --listen 127.0.0.1:9003 --name blog & pids+=($!)
openssl s_server -quiet -accept 127.0.0.1:9443 -cert "$out/vault.crt" -key "$out/vault.key" -www >/dev/null 2>&1 & pids+=($!)

cat <<MSG

Wharf quickstart. Try, in another terminal:
  curl --cacert $out/ca.crt --resolve shop.example.com:8443:127.0.0.1 https://shop.example.com:8443/api
  curl --cacert $out/ca.crt --resolve blog.example.com:8443:127.0.0.1 https://blog.example.com:8443/
  curl --cacert $out/ca.crt --resolve x.apps.example.com:8443:127.0.0.1 https://x.apps.example.com:8443/
  curl -i -H 'Host: shop.example.com' http://127.0.0.1:8080/      # 308 to https
  openssl s_client -connect 127.0.0.1:8443 -servername blog.example.com </dev/null 2>/dev/null | grep subject=
  openssl s_client -connect 127.0.0.1:8443 </dev/null 2>/dev/null | grep subject=     # no SNI: default
  curl --cacert $out/ca.crt --resolve vault.example.com:15443:127.0.0.1 https://vault.example.com:15443/
  curl -H 'Host: anything' http://127.0.0.1:31400/                # TCP to the api backend
  curl http://127.0.0.1:15021/metrics

MSG
exec "$WHARF_BIN" run -f "$here" -f "$out/secrets.yaml" \
  --default-ssl-certificate quickstart/default-tls \
  --tcp-service 31400=quickstart/api:80 "$@"
