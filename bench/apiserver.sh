#!/usr/bin/env bash
# M5 through a real API server, for bench/run.sh: etcd + kube-apiserver from the e2e
# harness, `wharf controller` with the chart's ServiceAccount, an echo backend in the
# harness's network namespace; Ingresses, then HTTPRoutes on the chart's edge Gateway. Prints TSV lines "<measure>\twharf-only\t1\t<value>".
# Usage: apiserver.sh WORKDIR SMOKE SECONDS
# For profiling: WHARF_BENCH_M5_SIZES="10000" runs one size, WHARF_BENCH_M5_KINDS="ingress"
# one half (ingress, httproute), and WHARF_BENCH_CONTROLLER_WRAP="heaptrack -o FILE"
# starts the controller under that command (the RSS reported is the controller's own) and
# stops it with SIGKILL, so that what heaptrack reports as leaked is what was live.
#
# `wharf-loadgen live` times each write: the clock starts when the POST is sent to the
# API server and stops at the proxy's first 200 for the new host, both over connections
# opened before the first write (starting curl for each write and each poll added about
# 10 ms a process on this VM). The API server's own answer is reported beside it.
set -euo pipefail
work="$(cd "$1" && pwd)" smoke="$2" seconds="$3"
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${WHARF_BENCH_BIN:-$root/target/release}"
wharf="$bin/wharf" loadgen="$bin/wharf-loadgen"
export E2E_DIR="$work/api"
out() { printf '%s\twharf-only\t1\t%s\n' "$1" "$2"; }
log() { echo "bench: $*" >&2; }
now() { date +%s.%N; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$root/e2e/harness/down.sh" >/dev/null 2>&1 || true
}
trap cleanup EXIT

"$root/e2e/harness/up.sh" >"$work/api-up.log" 2>&1 || { log "API server harness failed"; cat "$work/api-up.log" >&2; exit 1; }
# shellcheck disable=SC1091
. "$E2E_DIR/env"
pki="$E2E_DIR/pki"
server=$(sed -n 's/^ *server: //p' "$KUBECONFIG")
api() { # method path [curl args...]: one request as cluster admin
  local m=$1 p=$2; shift 2
  curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" -X "$m" "$server$p" "$@"
}
ingress_json() { # name host
  printf '{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{"name":"%s","namespace":"bench"},"spec":{"ingressClassName":"wharf","rules":[{"host":"%s","http":{"paths":[{"path":"/","pathType":"Prefix","backend":{"service":{"name":"backend","port":{"number":80}}}}]}}]}}' "$1" "$2"
}

create_parts() { # what size: creates $work/api-part-{0..3} in 4 parallel streams
  local t0 creators=() p
  t0=$(now)
  for p in 0 1 2 3; do
    if [ -s "$work/api-part-$p" ]; then kubectl create -f "$work/api-part-$p" >/dev/null & creators+=($!); fi
  done
  for p in "${creators[@]}"; do wait "$p"; done
  rm -f "$work"/api-part-*
  log "API server: $2 $1 stored ($(echo "$(now) - $t0" | bc -l | xargs printf '%.1f') s to create)"
}
start_controller() { # extra flags: the controller on CPU 1, one worker; sets cpid
  # shellcheck disable=SC2086 # the wrapper is a command line
  TOKIO_WORKER_THREADS=1 taskset -c 1 ${WHARF_BENCH_CONTROLLER_WRAP:-} "$wharf" controller --kubeconfig "$WHARF_CONTROLLER_KUBECONFIG" \
    --listen-address 127.0.0.1 --http-port 18081 --https-port 18443 --passthrough-port 0 --admin-port 15034 \
    --access-log=false --election-namespace wharf-system --pod-name bench-0 "$@" >"$work/api-controller.log" 2>&1 &
  cpid=$!; pids+=("$cpid")
  if [ -n "${WHARF_BENCH_CONTROLLER_WRAP:-}" ]; then
    until ctl=$(pgrep -f "^$wharf controller" | head -1) && [ -n "$ctl" ]; do sleep 0.1; done
  else ctl=$cpid; fi
  for _ in $(seq 1 600); do curl -sf http://127.0.0.1:15034/healthz/ready >/dev/null 2>&1 && break; sleep 0.1; done
}
write_to_serving() { # what size collection-path prefix make-json count: POST count new objects, each timed to its first 200
  local what=$1 size=$2 path=$3 prefix=$4 make=$5 n=$6 line
  line=$(taskset -c 0 "$loadgen" live --api "$server" --cert "$pki/admin.crt" --key "$pki/admin.key" --path "$path" \
    --template "$("$make" '{name}' '{host}')" --prefix "$prefix-$size" --proxy 127.0.0.1:18081 --count "$n")
  # served_p50_ms=A served_p99_ms=B api_p50_ms=C api_p99_ms=D
  read -r p50 p99 a50 a99 < <(tr ' ' '\n' <<<"$line" | cut -d= -f2 | xargs)
  out "M5 API server write to serving, $size $what (ms, p50 / p99 of $n writes; in brackets the API server's own answer)" "$p50 / $p99 ($a50 / $a99)"
}
applies() { curl -s http://127.0.0.1:15034/metrics | awk '/^wharf_config_applies_total/ {print $2}'; }
stop_controller() { # the controller's RSS in MiB, then stops it
  rss=$(awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$ctl/status")
  kill "-$([ -n "${WHARF_BENCH_CONTROLLER_WRAP:-}" ] && echo KILL || echo TERM)" "$ctl" 2>/dev/null || true
  wait "$cpid" 2>/dev/null || true
}
failed_under_load() { # the failed requests wrk saw (non-2xx and socket errors), and its total
  local non2xx sockerr
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$work/api-wrk.txt"); non2xx=${non2xx:-0}
  sockerr=$(awk -F'[ ,]+' '/Socket errors/ {print $4+$6+$8+$10}' "$work/api-wrk.txt"); sockerr=${sockerr:-0}
  echo "$(( non2xx + sockerr )) $(awk '/requests in/ {print $1}' "$work/api-wrk.txt")"
}

# The backend, where the API server accepts an endpoint address.
$WHARF_E2E_BACKEND_EXEC "$wharf" echo --listen "$WHARF_E2E_BACKEND_IP:9000" --name bench >/dev/null 2>&1 &
pids+=($!)
kubectl create namespace bench >/dev/null

sizes="10 1000 10000"; [ "$smoke" = 1 ] && sizes="10 100"
sizes=${WHARF_BENCH_M5_SIZES:-$sizes} kinds=${WHARF_BENCH_M5_KINDS:-ingress httproute}
writes() { [ "$1" -ge 1000 ] && echo 100 || echo 20; } # writes timed at a size
if [[ " $kinds " == *" ingress "* ]]; then
created=0
for size in $sizes; do
  # Grow the set to $size Ingresses, each with its own TLS Secret, Service and
  # EndpointSlice (the class is the chart's: the generated one is dropped), created in 4
  # parallel streams.
  "$loadgen" ingresses --count "$size" --from "$created" --certs --services \
    --backend "$WHARF_E2E_BACKEND_IP:9000" --out "$work/api-ingresses.yaml"
  skip=0; [ "$created" = 0 ] && skip=1
  awk -v skip="$skip" -v dir="$work" 'NR == 1 || $0 == "---" { doc++; f = sprintf("%s/api-part-%d", dir, doc % 4) }
      doc > skip { print > f }' "$work/api-ingresses.yaml"
  create_parts "Ingresses (with Secrets, Services, EndpointSlices)" "$size"
  created=$size

  start_controller
  # Every stored Ingress must be served, with its certificate, before measuring.
  last=$((size - 1))
  until [ "$(curl -sk -o /dev/null -w '%{http_code}' --resolve "host-$last.bench.local:18443:127.0.0.1" "https://host-$last.bench.local:18443/")" = 200 ]; do sleep 0.1; done

  write_to_serving Ingresses "$size" /apis/networking.k8s.io/v1/namespaces/bench/ingresses fresh ingress_json "$(writes "$size")"

  if [ "$size" = 1000 ] || { [ "$smoke" = 1 ] && [ "$size" = 100 ]; }; then
    # 100 changes through the API server under steady keep-alive load: none may fail.
    taskset -c 0 wrk -t1 -c20 -d"$(( seconds + 30 ))s" -H "Host: fresh-$size-2.bench.local" http://127.0.0.1:18081/ > "$work/api-wrk.txt" 2>&1 &
    wrkpid=$!
    sleep 1
    before=$(applies)
    for i in $(seq 1 100); do
      api PUT /apis/networking.k8s.io/v1/namespaces/bench/ingresses/fresh-$size-1 -H 'Content-Type: application/json' \
        -d "$(ingress_json "fresh-$size-1" "change-$i.bench.local")" >/dev/null
      sleep 0.2
    done
    until [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: change-100.bench.local' http://127.0.0.1:18081/)" = 200 ]; do sleep 0.05; done
    applied=$(applies | awk -v b="$before" '{print $1 - b}')
    kill -INT "$wrkpid" 2>/dev/null || true
    wait "$wrkpid" || true
    read -r failed total < <(failed_under_load)
    out "M5 API server: failed requests during 100 Ingress updates under load (of $total; $applied configs applied)" "$failed"
  fi
  stop_controller
done
out "M5 controller RSS with $created Ingresses, TLS Secrets, Services and EndpointSlices (MiB)" "$rss"
fi

# The same through Gateway API: HTTPRoutes attached to the chart's edge Gateway
# (wharf-system/wharf, which the harness's helm install created), served on the HTTP
# listener. The controller serves no Ingress class here (the Ingresses above stay stored).
route_json() { # name host
  printf '{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":"%s","namespace":"bench"},"spec":{"parentRefs":[{"name":"wharf","namespace":"wharf-system","sectionName":"http"}],"hostnames":["%s"],"rules":[{"backendRefs":[{"name":"backend","port":80}]}]}}\n' "$1" "$2"
}
if [[ " $kinds " == *" httproute "* ]]; then
created=0
for size in $sizes; do
  for p in 0 1 2 3; do : > "$work/api-part-$p"; done
  for i in $(seq "$created" $((size - 1))); do
    route_json "route-$i" "route-$i.bench.local" >> "$work/api-part-$((i % 4))"
  done
  create_parts HTTPRoutes "$size"
  created=$size

  start_controller --controller-name wharf.dev/none --ingress-class none \
    --edge-gateway wharf-system/wharf --edge-port 80=http
  last=$((size - 1))
  until [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Host: route-$last.bench.local" http://127.0.0.1:18081/)" = 200 ]; do sleep 0.1; done
  # Up to 1,000 routes, measure once the leader has written every route's status
  # (route-<last> sorts last). With 10,000 that takes minutes (one status write at a time,
  # each written status coming back as a watch event that is translated again), so the
  # largest size is measured while the leader is still writing them.
  if [ "$size" -le 1000 ]; then
    until [ "$(kubectl get httproute "route-$last" -n bench -o jsonpath='{.status.parents[0].conditions[0].status}' 2>/dev/null)" = True ]; do sleep 0.5; done
  fi

  write_to_serving HTTPRoutes "$size" /apis/gateway.networking.k8s.io/v1/namespaces/bench/httproutes fresh-route route_json "$(writes "$size")"

  if [ "$size" = 1000 ] || { [ "$smoke" = 1 ] && [ "$size" = 100 ]; }; then
    # 100 HTTPRoute changes through the API server under steady keep-alive load.
    taskset -c 0 wrk -t1 -c20 -d"$(( seconds + 30 ))s" -H 'Host: route-0.bench.local' http://127.0.0.1:18081/ > "$work/api-wrk.txt" 2>&1 &
    wrkpid=$!
    sleep 1
    before=$(applies)
    for i in $(seq 1 100); do
      api PATCH /apis/gateway.networking.k8s.io/v1/namespaces/bench/httproutes/fresh-route-$size-1 \
        -H 'Content-Type: application/merge-patch+json' -d "{\"spec\":{\"hostnames\":[\"route-change-$i.bench.local\"]}}" >/dev/null
      sleep 0.2
    done
    until [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Host: route-change-100.bench.local' http://127.0.0.1:18081/)" = 200 ]; do sleep 0.05; done
    applied=$(applies | awk -v b="$before" '{print $1 - b}')
    kill -INT "$wrkpid" 2>/dev/null || true
    wait "$wrkpid" || true
    read -r failed total < <(failed_under_load)
    out "M5 API server: failed requests during 100 HTTPRoute updates under load (of $total; $applied configs applied)" "$failed"
  fi
  stop_controller
done
out "M5 controller RSS with $created HTTPRoutes (MiB)" "$rss"
fi
