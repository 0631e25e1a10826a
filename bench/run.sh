#!/usr/bin/env bash
# Benchmarks Wharf side by side with nginx and HAProxy on this machine and writes
# bench/RESULTS.md. Usage: bench/run.sh [--smoke] [--rounds N] [--seconds S] [--only M4|M5|M8|M9]
# --smoke runs one short round with the debug build the tests use: it checks that the
# script works end to end (CI runs it); its numbers mean nothing. --only runs only that
# measurement and prints its report without touching bench/RESULTS.md.
#
# Every proxy gets the same ECDSA P-256 certificate, TLS 1.3 only, one worker pinned to
# PROXY_CPU (1), access logs off, and the same backend (an nginx serving a 1 KiB body on
# 127.0.0.1:9000, pinned with the load generators to CLIENT_CPU (0)). Runs are interleaved
# (W, N, H, W, N, H, ...); RESULTS.md reports medians and ranges, and ratios.
#
#   M1  new TLS 1.3 full handshakes per second (one request per connection), and per
#       CPU-second of the proxy process
#   M2  HTTPS/1.1 keep-alive, 1 KiB: max req/s (wrk, 50 connections); then latency at a
#       fixed rate of 50% of nginx's max (wharf-loadgen, open loop)
#   M3  HTTP/2, 10 clients x 10 streams (h2load)
#   M4  10,000 certificates (Wharf): time to serving, RSS, handshake rate with a random
#       SNI per connection versus one name
#   M5  config propagation: 10 / 1,000 / 10,000 Ingresses, time from a changed file
#       (standalone) or an API server write (controller, bench/apiserver.sh) to serving it;
#       failed requests during 100 changes under load; the same through the API server
#       for HTTPRoutes on the chart's edge Gateway
#   M6  TCP proxy and TLS passthrough throughput (iperf3, 4 streams)
#   M7  TCP through an HBONE tunnel versus plain TCP (Wharf)
#   M8  memory per idle TLS client connection (10,000 connections, one request each),
#       HTTP/1.1 and HTTP/2, each proxy started afresh
#   M9  latency of a steady request stream while 10,000-Ingress configs are rebuilt (Wharf)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
rounds=5 seconds=10 smoke=0 report_only=0 profile=release only=
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 rounds=1 seconds=2 profile=dev ;;
    --report-only) report_only=1 ;;
    --rounds) rounds="$2"; shift ;;
    --seconds) seconds="$2"; shift ;;
    --only) only="$2"; shift; case "$only" in M4|M5|M8|M9) ;; *) echo "--only takes M4, M5, M8 or M9" >&2; exit 2 ;; esac ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
work="$root/target/bench"
mkdir -p "$work"
cd "$work"
log() { echo "bench: $*" >&2; }

# --- tools --------------------------------------------------------------------------
need=()
for t in nginx:nginx-light haproxy:haproxy wrk:wrk h2load:nghttp2-client iperf3:iperf3 taskset:util-linux openssl:openssl bc:bc curl:curl; do
  command -v "${t%%:*}" >/dev/null 2>&1 || need+=("${t#*:}")
done
[ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || need+=(libnginx-mod-stream)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Packages may start their own daemons; every process here is ours.
service nginx stop >/dev/null 2>&1 || true
service haproxy stop >/dev/null 2>&1 || true
service iperf3 stop >/dev/null 2>&1 || true
# The smoke run's debug build is the one the e2e suite uses (e2e/build.sh: no rebuild).
if [ "$profile" = dev ]; then
  "$root/e2e/build.sh" >&2
else
  (cd "$root" && cargo build --profile "$profile" --locked -p wharf -p wharf-loadgen >&2)
fi
# Where the binaries are, for bench/wharf-only.sh and bench/apiserver.sh too.
WHARF_BENCH_BIN="$root/target/$([ "$profile" = dev ] && echo debug || echo "$profile")"
export WHARF_BENCH_BIN
wharf="$WHARF_BENCH_BIN/wharf"
loadgen="$WHARF_BENCH_BIN/wharf-loadgen"
# M8 holds 10,000 client connections in the load generator and as many in the proxy.
ulimit -n "$(ulimit -Hn)"
# taskset CPU lists, overridable. With more than two CPUs, give the load generators and
# the backend more than one (CLIENT_CPU=0,2,3) so that the proxy saturates first.
PROXY_CPU=${PROXY_CPU:-1} CLIENT_CPU=${CLIENT_CPU:-0}

# --- certificates and backend ---------------------------------------------------------
if [ ! -f cert.pem ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -subj /CN=bench.local -addext subjectAltName=DNS:bench.local -keyout key.pem -out cert.pem 2>/dev/null
fi
head -c 1024 /dev/zero | tr '\0' 'x' > 1k
mkdir -p nginx-backend nginx-proxy haproxy wharf
cat > nginx-backend/nginx.conf <<CONF
worker_processes 1;
pid $work/nginx-backend/pid;
error_log /dev/null;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:9000 reuseport backlog=4096;
    location / { root $work; try_files /1k =404; default_type text/plain; }
  }
}
CONF
cat > nginx-proxy/nginx.conf <<CONF
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1;
worker_rlimit_nofile 20000;
pid $work/nginx-proxy/pid;
error_log /dev/null;
events { worker_connections 16384; }
http {
  access_log off;
  keepalive_requests 1000000;
  upstream backend { server 127.0.0.1:9000; keepalive 128; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:8443 ssl http2 backlog=4096;
    server_name bench.local;
    ssl_certificate $work/cert.pem;
    ssl_certificate_key $work/key.pem;
    ssl_protocols TLSv1.3;
    location / {
      proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection "";
      # The request headers ingress-nginx sends, which Wharf sends too.
      proxy_set_header Host \$host;
      proxy_set_header X-Request-ID \$request_id;
      proxy_set_header X-Real-IP \$remote_addr;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Host \$host;
      proxy_set_header X-Forwarded-Port \$server_port;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_set_header X-Forwarded-Scheme \$scheme;
      proxy_set_header X-Scheme \$scheme;
    }
  }
}
stream {
  upstream iperf { server 127.0.0.1:5201; }
  server { listen 127.0.0.1:31400; proxy_pass iperf; }
}
CONF
cat > haproxy/haproxy.cfg <<CONF
global
  nbthread 1
  maxconn 10100
  # It asks for two descriptors per connection; M8's idle clients need one each.
  no strict-limits
  tune.ssl.default-dh-param 2048
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
frontend https
  bind 127.0.0.1:8443 ssl crt $work/haproxy/bundle.pem alpn h2,http/1.1 ssl-min-ver TLSv1.3
  # The request headers ingress-nginx sends, which Wharf sends too.
  option forwardfor
  http-request set-header X-Real-IP %[src]
  http-request set-header X-Forwarded-Proto https
  http-request set-header X-Forwarded-Scheme https
  http-request set-header X-Scheme https
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  http-request set-header X-Forwarded-Port %[dst_port]
  http-request set-header X-Request-ID %[uuid()]
  default_backend be
backend be
  server s1 127.0.0.1:9000
frontend tcp
  mode tcp
  bind 127.0.0.1:31400
  default_backend iperf
backend iperf
  mode tcp
  server s1 127.0.0.1:5201
CONF
cat cert.pem key.pem > haproxy/bundle.pem
cat > wharf/bench.yaml <<CONF
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: wharf}
spec: {controller: wharf.dev/ingress-controller}
---
apiVersion: v1
kind: Secret
metadata: {name: bench-tls, namespace: bench}
type: kubernetes.io/tls
stringData:
  tls.crt: |
$(sed 's/^/    /' cert.pem)
  tls.key: |
$(sed 's/^/    /' key.pem)
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: bench, namespace: bench}
spec:
  ingressClassName: wharf
  tls: [{hosts: [bench.local], secretName: bench-tls}]
  rules:
    - host: bench.local
      http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: backend, port: {number: 80}}}}]}
---
apiVersion: v1
kind: Service
metadata: {name: backend, namespace: bench}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: backend-1, namespace: bench, labels: {kubernetes.io/service-name: backend}}
addressType: IPv4
ports: [{name: http, port: 9000}]
endpoints: [{addresses: ["127.0.0.1"]}]
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
endpoints: [{addresses: ["127.0.0.1"]}]
CONF

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
taskset -c "$CLIENT_CPU" nginx -c "$work/nginx-backend/nginx.conf" -g 'daemon off;' & pids+=($!)
taskset -c "$CLIENT_CPU" iperf3 -s -B 127.0.0.1 -p 5201 >/dev/null 2>&1 & pids+=($!)
sleep 0.5

wait_port() { for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
start_proxy() { # name -> sets PROXY_PID
  case "$1" in
    wharf)
      TOKIO_WORKER_THREADS=1 taskset -c "$PROXY_CPU" "$wharf" run -f "$work/wharf/bench.yaml" --listen-address 127.0.0.1 \
        --https-port 8443 --http-port 0 --passthrough-port 0 --admin-port 15021 --access-log=false \
        --tcp-service 31400=bench/iperf:5201 >"$work/wharf.log" 2>&1 &
      PROXY_PID=$! ;;
    nginx)
      taskset -c "$PROXY_CPU" nginx -c "$work/nginx-proxy/nginx.conf" -g 'daemon off;' & PROXY_PID=$! ;;
    haproxy)
      taskset -c "$PROXY_CPU" haproxy -f "$work/haproxy/haproxy.cfg" -db >/dev/null 2>&1 & PROXY_PID=$! ;;
  esac
  wait_port 8443
  # Wharf serves once its config is applied.
  for _ in $(seq 1 100); do curl -sk --resolve bench.local:8443:127.0.0.1 https://bench.local:8443/ -o /dev/null && break; sleep 0.1; done
}
stop_proxy() { kill "$PROXY_PID" 2>/dev/null || true; wait "$PROXY_PID" 2>/dev/null || true; sleep 0.3; }
# CPU-seconds (user+system) of a process and its children so far.
cpu_seconds() { awk -v t="$(getconf CLK_TCK)" '{print ($14+$15+$16+$17)/t}' "/proc/$1/stat"; }
# nginx runs a master and one worker: count the worker.
proxy_worker() { local c; c=$(pgrep -P "$1" | head -1); echo "${c:-$1}"; }

results="$work/raw.tsv"
[ "$report_only" = 1 ] || : > "$results"
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$results"; } # metric proxy round value

client() { taskset -c "$CLIENT_CPU" "$@"; }
# A measurement with failed or non-2xx requests measures the wrong thing: stop.
fail() { log "$1 $2 round $3: $4"; printf '%s\n' "$5" >&2; exit 1; }
check_loadgen() { # metric proxy round output
  local bad; bad=$(echo "$4" | sed -n 's/.*\(failed\|errors\)=\([0-9]*\).*/\2/p')
  [ "${bad:-x}" = 0 ] || fail "$1" "$2" "$3" "requests failed" "$4"
}
check_wrk() {
  if echo "$4" | grep -qE 'Non-2xx|Socket errors'; then fail "$1" "$2" "$3" "requests failed" "$4"; fi
}
check_h2load() { # every request must have succeeded (2xx)
  local line; line=$(echo "$4" | grep '^requests:' || true)
  echo "$line" | grep -qE ' 0 failed, 0 errored' && ! echo "$line" | grep -q ' 0 succeeded' ||
    fail "$1" "$2" "$3" "requests failed or were not 2xx" "$4"
}
# Work per CPU-second of the proxy: rate * seconds / (proxy CPU time over the run).
per_cpu() { awk -v r="$1" -v s="$seconds" -v a="$2" -v b="$3" 'BEGIN{d=b-a; if (d<=0) d=0.001; printf "%.0f", r*s/d}'; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) {print 0} else if (NR%2) {print a[(NR+1)/2]} else {print (a[NR/2]+a[NR/2+1])/2}}'; }
range() { sort -n | awk 'NR==1{lo=$1} {hi=$1} END {printf "%s–%s", lo, hi}'; }
stat() { awk -F'\t' -v m="$1" -v p="$2" '$1==m && $2==p && $4!="" {print $4}' "$results"; }
# With --report-only, the rounds are those raw.tsv holds.
report_rounds=$rounds
[ "$report_only" = 1 ] && report_rounds=$(awk -F'\t' '$2!="wharf-only" && $3>m {m=$3} END {print m+0}' "$results") && rounds=0
main_rounds=$rounds
[ -n "$only" ] && main_rounds=0
for round in $(seq 1 "$main_rounds"); do
  for proxy in wharf nginx haproxy; do
    log "round $round: $proxy"
    start_proxy "$proxy"
    w=$(proxy_worker "$PROXY_PID")
    # M1
    c0=$(cpu_seconds "$w")
    out=$(client "$loadgen" handshakes --addr 127.0.0.1:8443 --sni bench.local --concurrency 32 --seconds "$seconds")
    c1=$(cpu_seconds "$w")
    check_loadgen M1 "$proxy" "$round" "$out"
    hs=$(echo "$out" | sed -n 's/.*handshakes_per_sec=\([0-9]*\).*/\1/p')
    record M1 "$proxy" "$round" "$hs"
    record M1cpu "$proxy" "$round" "$(per_cpu "$hs" "$c0" "$c1")"
    # M2 max
    c0=$(cpu_seconds "$w")
    out=$(client wrk -t1 -c50 -d"${seconds}s" -H 'Host: bench.local' https://127.0.0.1:8443/ 2>&1 || true)
    c1=$(cpu_seconds "$w")
    check_wrk M2 "$proxy" "$round" "$out"
    rps=$(echo "$out" | sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' | cut -d. -f1)
    record M2 "$proxy" "$round" "$rps"
    record M2cpu "$proxy" "$round" "$(per_cpu "${rps:-0}" "$c0" "$c1")"
    # M3 (h2load warms up for 1 s before its measured window)
    # The URL's authority becomes both SNI and :authority; --connect-to says where to dial.
    c0=$(cpu_seconds "$w")
    out=$(client h2load -c10 -m10 -D "$seconds" --warm-up-time=1 --connect-to=127.0.0.1:8443 https://bench.local:8443/ 2>&1 || true)
    c1=$(cpu_seconds "$w")
    check_h2load M3 "$proxy" "$round" "$out"
    rps=$(echo "$out" | sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p' | cut -d. -f1)
    record M3 "$proxy" "$round" "$rps"
    # The CPU time covers the warm-up second too, taken at the measured rate.
    record M3cpu "$proxy" "$round" "$(seconds=$((seconds + 1)) per_cpu "${rps:-0}" "$c0" "$c1")"
    # M6 TCP
    out=$(client iperf3 -c 127.0.0.1 -p 31400 -t "$seconds" -P 4 -f m 2>&1 || true)
    record M6tcp "$proxy" "$round" "$(echo "$out" | awk '/SUM.*receiver/ {print $6}')"
    stop_proxy
  done
done

# M2 latency at 50% of nginx's max, open loop, all proxies.
nginx_max=$(stat M2 nginx | median)
target=$(awk -v m="$nginx_max" 'BEGIN{printf "%.0f", m/2}')
for round in $(seq 1 "$main_rounds"); do
  for proxy in wharf nginx haproxy; do
    start_proxy "$proxy"
    out=$(client "$loadgen" rate --addr 127.0.0.1:8443 --sni bench.local --rate "$target" --connections 50 --seconds "$seconds")
    check_loadgen M2-latency "$proxy" "$round" "$out"
    record M2p50 "$proxy" "$round" "$(echo "$out" | sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p')"
    record M2p99 "$proxy" "$round" "$(echo "$out" | sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p')"
    stop_proxy
  done
done

# M8: memory per idle connection. Each proxy starts afresh for each protocol, so that memory
# an earlier measurement left behind in its heap does not hide what the connections take.
idle_conns=10000
[ "$smoke" = 1 ] && idle_conns=500
idle_rounds=$rounds
[ -n "$only" ] && [ "$only" != M8 ] && idle_rounds=0
for round in $(seq 1 "$idle_rounds"); do
  for proxy in wharf nginx haproxy; do
    for proto in h1 h2; do
      log "round $round: $proxy M8 $proto"
      start_proxy "$proxy"
      flags=(--connections "$idle_conns" --pid "$(proxy_worker "$PROXY_PID")")
      [ "$proto" = h2 ] && flags+=(--h2)
      out=$(client "$loadgen" idle --addr 127.0.0.1:8443 --sni bench.local "${flags[@]}")
      check_loadgen "M8$proto" "$proxy" "$round" "$out"
      record "M8$proto" "$proxy" "$round" "$(echo "$out" | sed -n 's/.*per_conn_kib=\([0-9.]*\).*/\1/p')"
      stop_proxy
    done
  done
done

# Wharf-only measurements.
if [ "$report_only" != 1 ]; then
  if [ -z "$only" ]; then
    "$here/wharf-only.sh" "$work" "$smoke" "$seconds" >> "$results"
    "$here/apiserver.sh" "$work" "$smoke" "$seconds" >> "$results"
  elif [ "$only" = M4 ] || [ "$only" = M9 ]; then
    "$here/wharf-only.sh" "$work" "$smoke" "$seconds" "$only" >> "$results"
  elif [ "$only" = M5 ]; then
    "$here/apiserver.sh" "$work" "$smoke" "$seconds" >> "$results"
  fi
fi

# --- report --------------------------------------------------------------------------
{
  echo "# Benchmark results"
  echo
  echo "Generated by \`bench/run.sh$( [ "$smoke" = 1 ] && echo ' --smoke')\` on $(date -u +%Y-%m-%d). $report_rounds round(s), ${seconds}s per measurement, interleaved."
  echo
  echo "## Machine"
  echo
  echo "- $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/ {print $2}') GiB"
  echo "- $(uname -sr); $(nginx -v 2>&1); $(haproxy -v | head -1 | cut -d' ' -f1-3); $("$wharf" --version); $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2); $(h2load --version | head -1)"
  echo "- proxy on CPU $PROXY_CPU (one worker: nginx \`worker_processes 1\`, HAProxy \`nbthread 1\`, Wharf \`TOKIO_WORKER_THREADS=1\`); load generators and the backend on CPU $CLIENT_CPU"
  echo "- ECDSA P-256 certificate, TLS 1.3 only, access logs off, backend: nginx returning a 1 KiB body on 127.0.0.1:9000"
  echo
  echo "## Results (median of $report_rounds; range in brackets)"
  echo
  echo "| Measure | Wharf | nginx | HAProxy | Wharf / nginx | Wharf / HAProxy |"
  echo "|---|---|---|---|---|---|"
  for m in "M1:M1 TLS 1.3 full handshakes/s (+1 request)" "M1cpu:M1 handshakes per proxy CPU-second" "M2:M2 HTTPS/1.1 keep-alive req/s, 50 conns" "M2cpu:M2 requests per proxy CPU-second" \
           "M2p50:M2 p50 latency ms at 50% of nginx max" "M2p99:M2 p99 latency ms at 50% of nginx max" "M3:M3 HTTP/2 req/s, 10 clients x 10 streams" "M3cpu:M3 requests per proxy CPU-second" \
           "M6tcp:M6 TCP proxy throughput Mbit/s (iperf3, 4 streams)" \
           "M8h1:M8 RSS KiB per idle TLS connection, HTTP/1.1 ($idle_conns)" "M8h2:M8 RSS KiB per idle TLS connection, HTTP/2 ($idle_conns)"; do
    key=${m%%:*} name=${m#*:}
    [ -n "$(stat "$key" wharf)" ] || continue
    w=$(stat "$key" wharf | median); n=$(stat "$key" nginx | median); h=$(stat "$key" haproxy | median)
    wr=$(stat "$key" wharf | range); nr=$(stat "$key" nginx | range); hr=$(stat "$key" haproxy | range)
    echo "| $name | $w [$wr] | $n [$nr] | $h [$hr] | $(awk -v a="$w" -v b="$n" 'BEGIN{if (b>0) printf "%.2f", a/b; else print "-"}') | $(awk -v a="$w" -v b="$h" 'BEGIN{if (b>0) printf "%.2f", a/b; else print "-"}') |"
  done
  echo
  echo "For latency and memory, lower is better (a ratio below 1 favours Wharf); for everything else higher is better."
  echo
  echo "## Wharf only"
  echo
  echo "| Measure | Value |"
  echo "|---|---|"
  awk -F'\t' '$2=="wharf-only" {printf "| %s | %s |\n", $1, $4}' "$results"
  echo
  echo "## How it was measured"
  echo
  echo "- M1: \`wharf-loadgen handshakes --concurrency 32\` (rustls client, no resumption, one GET per connection). Per CPU-second (M1, M2, M3): work divided by the proxy worker's utime+stime over the run (/proc/PID/stat); this is the fairer number when the load generator, not the proxy, saturates first."
  echo "- M2: \`wrk -t1 -c50 -H 'Host: bench.local' https://127.0.0.1:8443/\`; latency: \`wharf-loadgen rate --rate <50% of nginx's median max> --connections 50\`, measured from each request's due time (open loop)."
  echo "- M3: \`h2load -c10 -m10 -D <s> --warm-up-time=1 --connect-to=127.0.0.1:8443 https://bench.local:8443/\` (SNI and \`:authority\` both bench.local)."
  echo "- Every proxy sends the backend the request headers ingress-nginx sends (Host, X-Request-ID, X-Real-IP, X-Forwarded-For/-Host/-Port/-Proto). A run stops if any request fails or gets a non-2xx answer."
  echo "- M5 (API server): etcd + kube-apiserver from the e2e harness, \`wharf controller\` with the chart's ServiceAccount, backend in the harness's network namespace; every stored Ingress has its own TLS Secret, Service and EndpointSlice (\`wharf-loadgen ingresses --certs --services\`) and all are served over HTTPS before measuring; \`wharf-loadgen live\` POSTs a new Ingress (or HTTPRoute, attached to the chart's edge Gateway and served on the same HTTP listener) to the API server and polls the proxy for its host, both over connections opened before the first write; the clock starts when the POST is sent and stops at the first 200 for the host; p50 / p99 by nearest rank, and in brackets those of the API server's own answer to the POST. Standalone: from renaming the changed file into the watched directory (100 ms watch interval)."
  echo "- M4 (\`TOKIO_WORKER_THREADS=1\`, pinned to one CPU): \`wharf run -f certs.yaml\` with 10,000 Ingresses each with its own TLS Secret (\`wharf-loadgen ingresses --count 10000 --certs\`); time from start to \`/healthz/ready\`, RSS read one second after; handshakes with \`wharf-loadgen handshakes --concurrency 32\`, SNI one name or a random one of the 10,000."
  echo "- M8: \`wharf-loadgen idle --connections $idle_conns [--h2]\`: each connection makes a full TLS 1.3 handshake (ALPN http/1.1 or h2), sends one GET and reads the response, then stays open and idle; the figure is the growth of the proxy worker's VmRSS from before the first connection to 1 s after the last response, divided by the connection count. Each proxy is started afresh for each protocol."
  echo "- M9 (\`TOKIO_WORKER_THREADS=1\`, pinned to one CPU): \`wharf-loadgen rate --rate 500 --connections 10\` (HTTPS/1.1 keep-alive, open loop) to one of the 10,000 hosts of M4 served standalone, once with no changes and once while a file is rewritten every second, each rewrite rebuilding the whole config (10,000 Ingresses and certificates)."
  echo "- M6: \`iperf3 -P 4\` through each proxy's TCP listener (nginx \`stream\`, HAProxy \`mode tcp\`, Wharf \`--tcp-service\`)."
  echo "- Configs: \`target/bench/{nginx-proxy/nginx.conf,haproxy/haproxy.cfg,wharf/bench.yaml}\` as written by bench/run.sh."
  echo
  echo "Raw numbers: one line per measurement in \`target/bench/raw.tsv\`."
  if [ -f "$here/steps.md" ]; then echo; cat "$here/steps.md"; fi
} > "$work/RESULTS.md"
if [ "$smoke" = 1 ] || [ -n "$only" ]; then
  log "report: $work/RESULTS.md"
else
  cp "$work/RESULTS.md" "$here/RESULTS.md"
  log "wrote bench/RESULTS.md"
fi
cat "$work/RESULTS.md"
