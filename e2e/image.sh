#!/usr/bin/env bash
# Builds the gateway image from the repository's Dockerfile on a machine that reaches no
# image registry, makes the docker network the e2e suite runs it in (wharf-e2e,
# 198.19.1.0/24, the host at 198.19.1.1), and prints the suite's settings as shell exports
# (WHARF_E2E_IMAGE, WHARF_E2E_DOCKER).
#
# The Dockerfile's base images are build arguments. Their defaults are the public rust
# and distroless images; here they are replaced by equivalents made from Debian's
# packages with debootstrap (cached in $WHARF_TOOLS_DIR, default ~/.cache/wharf-tools):
#   wharf-e2e/rust:RUST-bookworm     Debian bookworm, gcc and libc6-dev, this machine's
#                                    Rust toolchain where the rust image keeps it, and the
#                                    CA certificates this machine trusts
#   wharf-e2e/cc-debian12:nonroot    what distroless/cc-debian12:nonroot holds that a Rust
#                                    binary can use: glibc, libgcc_s, CA certificates,
#                                    /etc/passwd with nonroot (65532), /tmp; no
#                                    shell, no package manager
# Starts dockerd (bridge and address pools in 198.19.0.0/16) when none answers.
#
# Environment: WHARF_IMAGE (default wharf:e2e), DOCKER (default: the docker CLI that
# speaks to the daemon), WHARF_DOCKERD_DIR (dockerd's log and pid file when started here).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cache="${WHARF_TOOLS_DIR:-$HOME/.cache/wharf-tools}/images"
image="${WHARF_IMAGE:-wharf:e2e}"
suite="bookworm"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
rust_version="$(rustc --version | awk '{print $2}')"
builder="wharf-e2e/rust:$rust_version-$suite"
runtime="wharf-e2e/cc-debian12:nonroot"
log() { echo "image: $*" >&2; }
mkdir -p "$cache"

# Debian's docker.io (20.10) CLI builds with BuildKit itself; a newer CLI elsewhere on PATH
# would want the buildx plugin, which Debian does not package.
docker="${DOCKER:-$(command -v /usr/bin/docker || command -v docker)}"
d() { "$docker" "$@"; }

start_dockerd() {
  d info >/dev/null 2>&1 && return 0
  command -v dockerd >/dev/null || { log "dockerd is missing (Debian: apt-get install docker.io)"; return 1; }
  local dir="${WHARF_DOCKERD_DIR:-$cache/dockerd}"
  mkdir -p "$dir"
  log "starting dockerd (log: $dir/dockerd.log)"
  # Never a private range: the bridge and every network docker makes stay in 198.19.0.0/16.
  setsid dockerd --bip 198.19.0.1/24 --default-address-pool base=198.19.0.0/16,size=24 \
    --pidfile "$dir/dockerd.pid" > "$dir/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 1 150); do
    d info >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  log "dockerd did not come up; see $dir/dockerd.log"
  tail -20 "$dir/dockerd.log" >&2
  return 1
}

# One debootstrap per machine, kept as a tarball.
rootfs_tar() {
  local tar="$cache/debian-$suite-build.tar"
  if [ ! -f "$tar" ]; then
    local dir="$cache/rootfs.tmp"
    rm -rf "$dir"
    command -v debootstrap >/dev/null || { log "debootstrap is missing (Debian: apt-get install debootstrap)"; return 1; }
    log "debootstrap $suite from $mirror"
    debootstrap --variant=minbase --include=gcc,libc6-dev,make,ca-certificates \
      "$suite" "$dir" "$mirror" > "$cache/debootstrap.log" 2>&1 \
      || { tail -20 "$cache/debootstrap.log" >&2; return 1; }
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
    tar -C "$dir" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
    rm -rf "$dir"
  fi
  echo "$tar"
}

build_builder() {
  local tar sysroot work
  tar="$(rootfs_tar)"
  sysroot="$(rustc --print sysroot)"
  work="$(mktemp -d)"
  log "making $builder (toolchain from $sysroot)"
  mkdir -p "$work/usr/local/rust" "$work/usr/local/cargo/bin"
  # The toolchain without its documentation, where the rust image keeps cargo and rustc.
  tar -C "$sysroot" --exclude=./share/doc -cf - . | tar -C "$work/usr/local/rust" -xf -
  for b in cargo rustc rustdoc; do ln -s "../../rust/bin/$b" "$work/usr/local/cargo/bin/$b"; done
  # The CA certificates this machine trusts: a proxy between it and crates.io may re-sign.
  mkdir -p "$work/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$work/etc/ssl/certs/"
  # One layer: the toolchain and the bundle appended to the Debian tree.
  cp "$tar" "$work/rootfs.tar"
  tar --delete -f "$work/rootfs.tar" ./etc/ssl/certs/ca-certificates.crt
  tar -C "$work" -rf "$work/rootfs.tar" ./usr/local/rust ./usr/local/cargo ./etc/ssl/certs/ca-certificates.crt
  d import \
    --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV CARGO_HOME=/usr/local/cargo' \
    --change 'ENV RUSTUP_HOME=/usr/local/rustup' \
    "$work/rootfs.tar" "$builder" >/dev/null
  rm -rf "$work"
}

build_runtime() {
  local tar src work
  tar="$(rootfs_tar)"
  work="$(mktemp -d)"
  src="$work/src"
  mkdir -p "$src" "$work/out"
  tar -C "$src" -xf "$tar"
  log "making $runtime"
  local out="$work/out"
  # The files of these packages (the dynamic loader's /lib64 link among them), docs left out.
  for pkg in libc6:amd64 libgcc-s1:amd64; do
    while IFS= read -r f; do
      case "$f" in /usr/share/doc* | /usr/share/lintian* | /usr/share/man* | /. ) continue ;; esac
      # The directory through the symlinks, the file itself as it is (symlinks stay links).
      local parent real
      parent="$(cd "$src" && realpath -m --relative-to=. "./$(dirname "${f#/}")" 2>/dev/null)" || continue
      real="$parent/$(basename "$f")"
      case "$real" in ../*) continue ;; esac
      [ -d "$src/$real" ] && [ ! -L "$src/$real" ] && continue
      (cd "$src" && cp -a --parents "$real" "$out/")
    done < "$src/var/lib/dpkg/info/$pkg.list"
  done
  (cd "$src" && cp -a lib lib64 "$out/" && cp -a --parents etc/ssl/certs/ca-certificates.crt "$out/")
  mkdir -p "$out/tmp" "$out/home/nonroot" "$out/root"
  chmod 1777 "$out/tmp"
  chown 65532:65532 "$out/home/nonroot"
  chmod 700 "$out/root"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$out/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' > "$out/etc/group"
  if [ -e "$out/bin/sh" ] || [ -e "$out/usr/bin/sh" ]; then
    log "the runtime image would hold a shell"
    return 1
  fi
  tar -C "$out" -cf "$work/runtime.tar" .
  d import --change 'USER 65532:65532' --change 'WORKDIR /home/nonroot' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$work/runtime.tar" "$runtime" >/dev/null
  rm -rf "$work"
}

start_dockerd
d network inspect wharf-e2e >/dev/null 2>&1 \
  || d network create --subnet 198.19.1.0/24 --gateway 198.19.1.1 wharf-e2e >/dev/null
# Each base image once per docker daemon.
d image inspect "$builder" >/dev/null 2>&1 || build_builder
d image inspect "$runtime" >/dev/null 2>&1 || build_runtime
log "building $image from $root/Dockerfile"
start=$(date +%s)
DOCKER_BUILDKIT=1 d build --progress=plain \
  --build-arg BUILDER_IMAGE="$builder" --build-arg RUNTIME_IMAGE="$runtime" \
  -t "$image" "$root" > "$cache/build.log" 2>&1 || { tail -40 "$cache/build.log" >&2; exit 1; }
size=$(d image inspect -f '{{.Size}}' "$image")
log "built $image in $(( $(date +%s) - start ))s: $((size / 1024 / 1024)) MiB (runtime base $(( $(d image inspect -f '{{.Size}}' "$runtime") / 1024 / 1024 )) MiB)"
echo "export WHARF_E2E_IMAGE=$image"
echo "export WHARF_E2E_DOCKER=$docker"
