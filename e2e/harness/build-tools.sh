#!/usr/bin/env bash
# Builds the upstream test tools the e2e harness runs, from the Go module proxy, once per
# machine: kube-apiserver, kube-controller-manager and kubectl (k8s.io/kubernetes), etcd
# (go.etcd.io/etcd/server/v3), helm (helm.sh/helm/v3), istiod (pilot-discovery from
# istio.io/istio, with the Istio CRDs of the same version), Pebble and pebble-challtestsrv
# (github.com/letsencrypt/pebble/v2, with its test certificates), and the Gateway API conformance
# suite with its echo server (sigs.k8s.io/gateway-api/conformance, at the version
# crds/GATEWAY_API_VERSION pins), and oauth2-proxy (github.com/oauth2-proxy/oauth2-proxy/v7,
# the sign-in service the external-authentication test runs). Prints the directory holding
# the binaries.
#
# Cache: $WHARF_TOOLS_DIR (default ~/.cache/wharf-tools)/k8s-$K8S_VERSION. Delete it to rebuild.
set -euo pipefail
K8S_VERSION="${K8S_VERSION:-1.35.4}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
HELM_VERSION="${HELM_VERSION:-3.19.5}"
PEBBLE_VERSION="${PEBBLE_VERSION:-2.10.1}"
OAUTH2_PROXY_VERSION="${OAUTH2_PROXY_VERSION:-7.15.6}"
# istio.io/istio publishes no semver tags as a Go module: a pseudo-version (master, 2026-08-27).
ISTIO_VERSION="${ISTIO_VERSION:-v0.0.0-20260827124520-eed52ebb66ad}"
tools="${WHARF_TOOLS_DIR:-$HOME/.cache/wharf-tools}/k8s-$K8S_VERSION"
here_dir="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$tools"
log() { echo "build-tools: $*" >&2; }
export GOFLAGS="${GOFLAGS:--mod=mod}" GOTOOLCHAIN=local CGO_ENABLED=0

build_kube() {
  local work="$tools/src-kubernetes"
  mkdir -p "$work"
  cd "$work"
  if [ ! -f go.mod ]; then
    log "fetching k8s.io/kubernetes v$K8S_VERSION"
    local dir
    dir=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    local minor="${K8S_VERSION#*.}"
    local staging="0.$minor"
    {
      echo "module wharf.dev/e2e-tools"
      echo
      echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$dir/go.mod")"
      echo
      echo "require k8s.io/kubernetes v$K8S_VERSION"
      echo
      # Kubernetes' own go.mod points its staging modules at ./staging; use the published ones.
      grep -E '^\s*k8s.io/[a-z0-9-]+ => ./staging' "$dir/go.mod" | awk -v v="v$staging" '{print "replace " $1 " => " $1 " " v}'
    } > go.mod
    printf 'package tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n\t_ "k8s.io/kubernetes/cmd/kubectl"\n)\n' > tools.go
    go mod tidy >&2
  fi
  if ! grep -q kube-controller-manager tools.go; then
    # A cache from before kube-controller-manager was built: add it to the module.
    printf 'package tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n\t_ "k8s.io/kubernetes/cmd/kubectl"\n)\n' > tools.go
    go mod tidy >&2
  fi
  for cmd in kube-apiserver kube-controller-manager kubectl; do
    if [ ! -x "$tools/$cmd" ]; then
      log "building $cmd (takes a while on a small machine)"
      go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#*.}" -o "$tools/$cmd" "k8s.io/kubernetes/cmd/$cmd" >&2
    fi
  done
}

build_module_tool() { # binary, module@version, package, [extra -ldflags]
  local bin="$1" modver="$2" pkg="$3" ldflags="${4:-}"
  [ -x "$tools/$bin" ] && return
  local work="$tools/src-$bin"
  mkdir -p "$work"
  cd "$work"
  if [ ! -f go.mod ]; then
    printf 'module wharf.dev/e2e-%s\n\ngo 1.24\n' "$bin" > go.mod
    printf 'package tools\n\nimport _ "%s"\n' "$pkg" > tools.go
    go get "$modver" >&2
    go mod tidy >&2
  fi
  log "building $bin"
  go build -trimpath -ldflags "-s -w $ldflags" -o "$tools/$bin" "$pkg" >&2
}

# istiod and the CRDs it watches (Istio's base chart ships them).
build_istiod() {
  build_module_tool pilot-discovery "istio.io/istio@$ISTIO_VERSION" istio.io/istio/pilot/cmd/pilot-discovery
  if [ ! -f "$tools/istio-crds.yaml" ]; then
    local dir
    dir=$(cd "$tools/src-pilot-discovery" && go mod download -json "istio.io/istio@$ISTIO_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    cp "$dir/manifests/charts/base/files/crd-all.gen.yaml" "$tools/istio-crds.yaml"
    chmod u+w "$tools/istio-crds.yaml"
  fi
}

# The Gateway API conformance suite, as a test binary of a small module calling its runner
# (the suite's own module replaces gateway-api with a relative path, so it cannot be built
# or installed directly), and echo-basic, the backend its manifests run.
build_conformance() {
  local version
  version=$(cat "$here_dir/../../crds/GATEWAY_API_VERSION")
  [ -x "$tools/gateway-conformance-$version.test" ] && [ -x "$tools/echo-basic-$version" ] && return
  local work="$tools/src-gateway-conformance-$version"
  mkdir -p "$work"
  cd "$work"
  if [ ! -f go.mod ]; then
    printf 'module wharf.dev/e2e-gateway-conformance\n\ngo 1.24\n' > go.mod
    printf 'package conformance\n\nimport (\n\t"testing"\n\n\t"sigs.k8s.io/gateway-api/conformance"\n)\n\nfunc TestConformance(t *testing.T) {\n\tconformance.RunConformance(t)\n}\n' > conformance_test.go
    printf 'package conformance\n' > doc.go
    go get "sigs.k8s.io/gateway-api@$version" "sigs.k8s.io/gateway-api/conformance@$version" >&2
    go mod tidy >&2
  fi
  log "building the Gateway API conformance suite $version"
  go test -c -trimpath -o "$tools/gateway-conformance-$version.test" . >&2
  go build -trimpath -ldflags "-s -w" -o "$tools/echo-basic-$version" sigs.k8s.io/gateway-api/conformance/echo-basic >&2
}

# Let's Encrypt's test ACME server, its DNS server for the validation lookups, and the
# certificate its directory listens with (and the root that signs it).
build_pebble() {
  build_module_tool pebble "github.com/letsencrypt/pebble/v2@v$PEBBLE_VERSION" github.com/letsencrypt/pebble/v2/cmd/pebble
  build_module_tool pebble-challtestsrv "github.com/letsencrypt/pebble/v2@v$PEBBLE_VERSION" \
    github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv
  if [ ! -f "$tools/pebble-certs/pebble.minica.pem" ]; then
    local dir
    dir=$(cd "$tools/src-pebble" && go mod download -json "github.com/letsencrypt/pebble/v2@v$PEBBLE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    mkdir -p "$tools/pebble-certs"
    cp "$dir/test/certs/localhost/cert.pem" "$dir/test/certs/localhost/key.pem" "$dir/test/certs/pebble.minica.pem" "$tools/pebble-certs/"
    chmod u+w "$tools/pebble-certs/"*
  fi
}

build_kube
build_conformance
build_pebble
build_istiod
build_module_tool etcd "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" go.etcd.io/etcd/server/v3
build_module_tool helm "helm.sh/helm/v3@v$HELM_VERSION" helm.sh/helm/v3/cmd/helm
build_module_tool oauth2-proxy "github.com/oauth2-proxy/oauth2-proxy/v7@v$OAUTH2_PROXY_VERSION" \
  github.com/oauth2-proxy/oauth2-proxy/v7 \
  "-X github.com/oauth2-proxy/oauth2-proxy/v7/pkg/version.VERSION=v$OAUTH2_PROXY_VERSION"
echo "$tools"
