#!/usr/bin/env bash
# Makes a test CA, one certificate per quickstart host, and secrets.yaml holding them as
# kubernetes.io/tls Secrets. Usage: gen-certs.sh OUT_DIR
set -euo pipefail
out="$1"
mkdir -p "$out"
cd "$out"
ec() { openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out "$1"; }

if [ ! -f ca.crt ]; then
  ec ca.key
  openssl req -x509 -new -key ca.key -days 3650 -subj "/CN=Wharf Quickstart CA" -out ca.crt 2>/dev/null
fi

issue() { # name, SAN list
  ec "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=${2%%,*}" -out "$1.csr" 2>/dev/null
  printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
    "$(echo "$2" | sed 's/\([^,]*\)/DNS:\1/g')" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 825 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
}
issue shop shop.example.com
issue blog blog.example.com
issue apps '*.apps.example.com'
issue default wharf.local
issue vault vault.example.com

secret() { # secret name, cert file base
  printf -- '---\napiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: quickstart}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n' "$1"
  sed 's/^/    /' "$2.crt"
  printf '  tls.key: |\n'
  sed 's/^/    /' "$2.key"
}
{
  secret shop-tls shop
  secret blog-tls blog
  secret apps-wildcard-tls apps
  secret default-tls default
} > secrets.yaml
echo "certificates and secrets.yaml written to $out"
