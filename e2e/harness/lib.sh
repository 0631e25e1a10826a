# Shared by the harness scripts: stopping a process recorded in a pid file, and waiting
# for a readiness URL. Source it; it defines functions only.

# stop_pidfile FILE: sends SIGTERM to the process in FILE, waits up to 10 s, then SIGKILL
# and waits until it is gone (kube-apiserver's graceful shutdown keeps serving open watches
# with its listener closed, so a process left behind would hide an outage), removes FILE.
stop_pidfile() {
  [ -f "$1" ] || return 0
  local pid
  pid="$(cat "$1")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$1"
}

# wait_ready NAME PIDFILE LOG TRIES CURL-ARGS...: polls with curl every 0.2 s until the URL
# answers, the process exits (the log's tail is shown), or TRIES polls have failed.
wait_ready() {
  local name="$1" pidfile="$2" log="$3" tries="$4"
  shift 4
  for _ in $(seq 1 "$tries"); do
    if curl -sf "$@" >/dev/null 2>&1; then
      return 0
    fi
    kill -0 "$(cat "$pidfile")" 2>/dev/null || { echo "$name exited; see $log" >&2; tail -20 "$log" >&2; return 1; }
    sleep 0.2
  done
  echo "$name not ready after $((tries / 5))s; see $log" >&2
  return 1
}
