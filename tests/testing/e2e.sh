# Sourced by the tests/cli scripts that run a real `dsv4 serve` (wait_for_summary) or a tests/e2e module against one.
# run_e2e BIN MODULE [PACKAGE]: tests/e2e/dsv4_server.py starts BIN (DSV4_BIN). A Python package the module
# needs beyond the standard library fails the test when missing, never skips it (scripts/setup.sh installs it).
run_e2e() {
  local bin=$1 module=$2 package=${3:-} py=python3
  if [ -n "$package" ]; then
    # Debian's python3-<package> serves /usr/bin/python3; a pip install serves the python3 on PATH.
    py=""
    for p in python3 /usr/bin/python3; do
      if "$p" -c "import $package" 2>/dev/null; then py=$p; break; fi
    done
    [ -n "$py" ] || { echo "$module: the Python package $package is missing (scripts/setup.sh installs it)"; exit 1; }
  fi
  DSV4_BIN=$(realpath "$bin")
  export DSV4_BIN
  cd "${DSV4_SRC:-$(dirname "${BASH_SOURCE[0]}")/../..}/tests/e2e" || exit 1
  exec "$py" -m unittest -v "$module" 2>&1
}

# wait_for_summary LOG PID: waits until the `dsv4 serve` started as PID, logging to LOG, has printed its
# startup summary (the curl line ends it); fails with the log when the server exits first.
wait_for_summary() {
  local log=$1 pid=$2
  for _ in $(seq 1 600); do
    grep -q '^  try:' "$log" && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "serve exited early"; exit 1; }
    sleep 0.1
  done
  cat "$log"
  echo "no startup summary in 60 s"
  exit 1
}
