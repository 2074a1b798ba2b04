# Sourced by the bench scripts that drive `dsv4 serve` on loopback.
# start_server LOG PORT COMMAND...: runs COMMAND in the background (its output to LOG), sets $server to
# its pid and returns once /health answers; exits the script if the server dies first.
start_server() {
  local log=$1 port=$2
  shift 2
  "$@" >"$log" 2>&1 &
  server=$!
  for _ in $(seq 240); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1)" 2>/dev/null && return 0
    kill -0 $server 2>/dev/null || { echo "serve exited:"; tail -n 20 "$log"; exit 1; }
    sleep 0.5
  done
  echo "serve did not answer /health in 120 s"; exit 1
}
stop_server() { kill $server 2>/dev/null; wait $server 2>/dev/null; }
