#!/usr/bin/env bash
# Compares two Wharf binaries on the HTTP request path, as bench/run.sh measures it: M2
# (HTTPS/1.1 keep-alive, wrk, 50 connections) and M3 (HTTP/2, h2load, 10 clients x 10
# streams), requests per second and per proxy CPU-second, rounds interleaved (A, B, A, B,
# ...), medians printed as B/A ratios. For a change on the request path: build the
# release binary before and after it, then
#   bench/ab.sh BEFORE/wharf AFTER/wharf [--rounds N] [--seconds S]
# It reuses the certificate, backend and config bench/run.sh writes to target/bench (run
# bench/run.sh --smoke once first), with the same CPU pinning.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bench/ab.sh A_BIN B_BIN [--rounds N] [--seconds S]" >&2; exit 2; }
a=$(realpath "$1") b=$(realpath "$2")
shift 2
rounds=3 seconds=8
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift ;;
    --seconds) seconds="$2"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
root=$(cd "$(dirname "$0")/.." && pwd)
work="$root/target/bench"
[ -f "$work/wharf/bench.yaml" ] || { echo "run bench/run.sh --smoke first: $work has no config" >&2; exit 1; }
cd "$work"
PROXY_CPU=${PROXY_CPU:-1} CLIENT_CPU=${CLIENT_CPU:-0}
client() { taskset -c "$CLIENT_CPU" "$@"; }
cpu_seconds() { awk -v t="$(getconf CLK_TCK)" '{print ($14+$15+$16+$17)/t}' "/proc/$1/stat"; }
wait_port() { for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }

taskset -c "$CLIENT_CPU" nginx -c "$work/nginx-backend/nginx.conf" -g 'daemon off;' &
backend=$!
trap 'kill "$backend" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
wait_port 9000

out="$work/ab.tsv"
: > "$out"
for round in $(seq 1 "$rounds"); do
  for side in A B; do
    bin=$a
    [ "$side" = B ] && bin=$b
    TOKIO_WORKER_THREADS=1 taskset -c "$PROXY_CPU" "$bin" run -f "$work/wharf/bench.yaml" --listen-address 127.0.0.1 \
      --https-port 8443 --http-port 0 --passthrough-port 0 --admin-port 15021 --access-log=false >"$work/ab-$side.log" 2>&1 &
    pid=$!
    wait_port 8443
    for _ in $(seq 1 100); do curl -sk --resolve bench.local:8443:127.0.0.1 https://bench.local:8443/ -o /dev/null && break; sleep 0.1; done
    c0=$(cpu_seconds "$pid")
    wrk_out=$(client wrk -t1 -c50 -d"${seconds}s" -H 'Host: bench.local' https://127.0.0.1:8443/ 2>&1 || true)
    c1=$(cpu_seconds "$pid")
    if echo "$wrk_out" | grep -qE 'Non-2xx|Socket errors'; then echo "$side round $round: M2 requests failed" >&2; echo "$wrk_out" >&2; exit 1; fi
    rps=$(echo "$wrk_out" | sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' | cut -d. -f1)
    printf 'M2\t%s\t%s\t%s\n' "$side" "$rps" "$(echo "$rps * $seconds / ($c1 - $c0)" | bc)" >> "$out"
    c0=$(cpu_seconds "$pid")
    h2_out=$(client h2load -c10 -m10 -D "$seconds" --warm-up-time=1 --connect-to=127.0.0.1:8443 https://bench.local:8443/ 2>&1 || true)
    c1=$(cpu_seconds "$pid")
    echo "$h2_out" | grep '^requests:' | grep -qE ' 0 failed, 0 errored' || { echo "$side round $round: M3 requests failed" >&2; echo "$h2_out" >&2; exit 1; }
    rps=$(echo "$h2_out" | sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p' | cut -d. -f1)
    printf 'M3\t%s\t%s\t%s\n' "$side" "$rps" "$(echo "$rps * ($seconds + 1) / ($c1 - $c0)" | bc)" >> "$out"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    sleep 0.3
  done
done

median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
printf '%-4s %12s %12s %8s %14s %14s %8s\n' "" "A req/s" "B req/s" "B/A" "A req/CPU-s" "B req/CPU-s" "B/A"
for m in M2 M3; do
  ra=$(awk -F'\t' -v m="$m" '$1==m && $2=="A" {print $3}' "$out" | median)
  rb=$(awk -F'\t' -v m="$m" '$1==m && $2=="B" {print $3}' "$out" | median)
  ca=$(awk -F'\t' -v m="$m" '$1==m && $2=="A" {print $4}' "$out" | median)
  cb=$(awk -F'\t' -v m="$m" '$1==m && $2=="B" {print $4}' "$out" | median)
  printf '%-4s %12s %12s %8.3f %14s %14s %8.3f\n' "$m" "$ra" "$rb" "$(echo "$rb / $ra" | bc -l)" "$ca" "$cb" "$(echo "$cb / $ca" | bc -l)"
done
