#!/usr/bin/env bash
# Wharf-only measurements for bench/run.sh (M4, M5, M7, M9). Prints TSV lines
# "<measure>\twharf-only\t1\t<value>". Usage: wharf-only.sh WORKDIR SMOKE SECONDS [ONLY]
# ONLY (M4 or M9) runs that measurement alone.
set -euo pipefail
work="$1" smoke="$2" seconds="$3" only="${4:-}"
want() { [ -z "$only" ] || [ "$only" = "$1" ]; }
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${WHARF_BENCH_BIN:-$root/target/release}"
wharf="$bin/wharf" loadgen="$bin/wharf-loadgen"
cd "$work"
out() { printf '%s\twharf-only\t1\t%s\n' "$1" "$2"; }
log() { echo "bench: $*" >&2; }
now() { date +%s.%N; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
ready() { for _ in $(seq 1 3000); do curl -sf "http://127.0.0.1:$1/healthz/ready" >/dev/null 2>&1 && return 0; sleep 0.01; done; return 1; }
start() { # admin port, args...
  local admin=$1; shift
  TOKIO_WORKER_THREADS=1 taskset -c 1 "$wharf" run --listen-address 127.0.0.1 --passthrough-port 0 --admin-port "$admin" --access-log=false "$@" >"$work/wharf-only.log" 2>&1 &
  WPID=$!; pids+=("$WPID")
}

# M4: 10,000 certificates.
n=10000; [ "$smoke" = 1 ] && n=1000
"$loadgen" ingresses --count "$n" --certs --out certs.yaml --names certs.names
if want M4; then
t0=$(now); start 15031 -f certs.yaml --https-port 18443 --http-port 0; ready 15031; t1=$(now)
out "M4 time to serving $n certificates (s)" "$(echo "$t1 - $t0" | bc -l | xargs printf '%.2f')"
# Settled: read a second after ready, once the control thread has given back what building
# the first config freed.
sleep 1
out "M4 RSS with $n certificates (MiB)" "$(awk '/VmRSS/ {printf "%.1f", $2/1024}' /proc/$WPID/status)"
handshakes() { # loadgen args -> handshakes/s; stops when any handshake or request failed
  local o; o=$(taskset -c 0 "$loadgen" handshakes --addr 127.0.0.1:18443 --concurrency 32 --seconds "$seconds" "$@")
  echo "$o" | grep -q ' failed=0$' || { log "M4 handshakes failed: $o"; exit 1; }
  echo "$o" | sed -n 's/.*handshakes_per_sec=\([0-9]*\).*/\1/p'
}
one=$(handshakes --sni host-0.bench.local)
rnd=$(handshakes --sni-file certs.names)
out "M4 handshakes/s, one SNI, $n certificates loaded" "$one"
out "M4 handshakes/s, random SNI of $n" "$rnd"
kill "$WPID"; wait "$WPID" 2>/dev/null || true
fi

# M9: latency of a steady HTTPS request stream while the config of the 10,000 Ingresses
# and certificates of M4 is rebuilt about once a second (a changed file each time), beside
# the same stream with no changes.
if want M9; then
  rm -rf rebuild && mkdir rebuild && cp certs.yaml rebuild/base.yaml
  start 15034 -f rebuild --https-port 18443 --http-port 0 --watch-interval 100ms; ready 15034
  stream() { # -> loadgen output; stops when any request failed
    local o; o=$(taskset -c 0 "$loadgen" rate --addr 127.0.0.1:18443 --sni host-0.bench.local --rate 500 --connections 10 --seconds "$seconds")
    echo "$o" | grep -q ' errors=0$' || { log "M9 requests failed: $o"; exit 1; }
    echo "$o"
  }
  applies() { curl -s http://127.0.0.1:15034/metrics | awk '/^wharf_config_applies_total/ {print $2}'; }
  quiet=$(stream)
  a0=$(applies)
  (
    i=0
    while :; do
      i=$((i + 1))
      printf 'apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: fresh, namespace: bench}\nspec:\n  ingressClassName: wharf\n  rules: [{host: rebuild-%s.bench.local, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: backend, port: {number: 80}}}}]}}]\n' "$i" > rebuild/extra.yaml.tmp
      mv rebuild/extra.yaml.tmp rebuild/extra.yaml
      sleep 1
    done
  ) &
  changer=$!
  busy=$(stream)
  kill "$changer"; wait "$changer" 2>/dev/null || true
  rebuilds=$(( $(applies) - a0 ))
  p() { echo "$2" | sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
  out "M9 p50 / p99 ms, 500 req/s HTTPS, no config changes" "$(p p50_ms "$quiet") / $(p p99_ms "$quiet")"
  out "M9 p50 / p99 ms, 500 req/s HTTPS, while $n-Ingress configs are rebuilt ($rebuilds rebuilds)" "$(p p50_ms "$busy") / $(p p99_ms "$busy")"
  kill "$WPID"; wait "$WPID" 2>/dev/null || true
fi
want M5 || exit 0

# M5: propagation with 10, 1,000, 10,000 Ingresses (file watch interval 100 ms).
sizes="10 1000 10000"; [ "$smoke" = 1 ] && sizes="10 1000"
for size in $sizes; do
  rm -rf prop && mkdir prop
  "$loadgen" ingresses --count "$size" --out prop/base.yaml
  start 15032 -f prop --https-port 0 --http-port 18080 --watch-interval 100ms; ready 15032
  times=()
  for k in 1 2 3; do
    host="fresh-$k.bench.local"
    t0=$(now)
    printf 'apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: fresh, namespace: bench}\nspec:\n  ingressClassName: wharf\n  rules: [{host: %s, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: backend, port: {number: 80}}}}]}}]\n' "$host" > prop/extra.yaml.tmp
    mv prop/extra.yaml.tmp prop/extra.yaml
    until [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Host: $host" http://127.0.0.1:18080/)" = 200 ]; do :; done
    times+=("$(echo "($(now) - $t0) * 1000" | bc -l)")
  done
  out "M5 file change to serving, $size Ingresses (ms, median of 3)" "$(printf '%s\n' "${times[@]}" | sort -n | sed -n 2p | xargs printf '%.0f')"
  if [ "$size" = 1000 ]; then
    # 100 changes under steady keep-alive load: every request must succeed.
    taskset -c 0 wrk -t1 -c20 -d"$(( seconds + 20 ))s" -H 'Host: host-0.bench.local' http://127.0.0.1:18080/ > wrk-changes.txt 2>&1 &
    wrkpid=$!
    sleep 1
    for i in $(seq 1 100); do
      printf 'apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: fresh, namespace: bench}\nspec:\n  ingressClassName: wharf\n  rules: [{host: change-%s.bench.local, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: backend, port: {number: 80}}}}]}}]\n' "$i" > prop/extra.yaml.tmp
      mv prop/extra.yaml.tmp prop/extra.yaml
      sleep 0.15
    done
    applied=$(curl -s http://127.0.0.1:15032/metrics | awk '/^wharf_config_applies_total/ {print $2}')
    wait "$wrkpid" || true
    non2xx=$(awk '/Non-2xx/ {print $NF}' wrk-changes.txt); non2xx=${non2xx:-0}
    sockerr=$(awk -F'[ ,]+' '/Socket errors/ {print $4+$6+$8+$10}' wrk-changes.txt); sockerr=${sockerr:-0}
    total=$(awk '/requests in/ {print $1}' wrk-changes.txt)
    out "M5 failed requests during 100 changes under load (of $total; $applied configs applied)" "$(( non2xx + sockerr ))"
  fi
  kill "$WPID"; wait "$WPID" 2>/dev/null || true
done

# M7: TCP through an HBONE tunnel versus plain TCP, to the iperf3 server on :5201.
mkdir -p mesh
if [ ! -f mesh/ca.crt ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 -subj /CN=bench-mesh-root \
    -keyout mesh/ca.key -out mesh/ca.crt 2>/dev/null
  for id in gateway iperf; do
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/O=bench" -keyout "mesh/$id.key" -out "mesh/$id.csr" 2>/dev/null
    printf 'subjectAltName=URI:spiffe://cluster.local/ns/bench/sa/%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$id" > "mesh/$id.ext"
    openssl x509 -req -in "mesh/$id.csr" -CA mesh/ca.crt -CAkey mesh/ca.key -CAcreateserial -days 30 -extfile "mesh/$id.ext" -out "mesh/$id.crt" 2>/dev/null
  done
fi
mkdir -p mesh/empty
cat > mesh/ambient.yaml <<CONF
apiVersion: v1
kind: Namespace
metadata: {name: bench, labels: {istio.io/dataplane-mode: ambient}}
---
apiVersion: v1
kind: Pod
metadata: {name: iperf-0, namespace: bench}
spec: {serviceAccountName: iperf, containers: [{name: iperf, image: none}]}
---
apiVersion: v1
kind: Service
metadata: {name: iperf, namespace: bench}
spec: {ports: [{name: tcp, port: 5201}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: iperf-1, namespace: bench, labels: {kubernetes.io/service-name: iperf}}
addressType: IPv4
ports: [{name: tcp, port: 5201}]
endpoints: [{addresses: ["127.0.0.1"], targetRef: {kind: Pod, namespace: bench, name: iperf-0}}]
CONF
# The receiving side: a Wharf HBONE inbound standing in for ztunnel.
taskset -c 0 "$wharf" run -f mesh/empty --listen-address 127.0.0.1 --http-port 0 --https-port 0 --passthrough-port 0 --admin-port 0 \
  --hbone-port 15008 --hbone-allow-destination 127.0.0.1 --mesh-cert mesh/iperf.crt --mesh-key mesh/iperf.key --mesh-roots mesh/ca.crt >"$work/ztunnel.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/15008) 2>/dev/null && break; sleep 0.1; done
start 15033 -f mesh/ambient.yaml --https-port 0 --http-port 0 --tcp-service 32400=bench/iperf:5201 \
  --mesh-cert mesh/gateway.crt --mesh-key mesh/gateway.key --mesh-roots mesh/ca.crt
ready 15033
hb=$( (taskset -c 0 iperf3 -c 127.0.0.1 -p 32400 -t "$seconds" -P 4 -f m 2>&1 || true) | awk '/SUM.*receiver/ {print $6}')
tunnels=$(curl -s http://127.0.0.1:15033/metrics | awk -F' ' '/^wharf_hbone_tunnels_total\{direction="outbound",result="ok"\}/ {print $2}')
out "M7 TCP over HBONE Mbit/s (iperf3, 4 streams; $tunnels tunnels)" "$hb"
kill "$WPID"; wait "$WPID" 2>/dev/null || true
