# Sourced by the tests/cli scripts that run a tests/e2e module (Python unittest) against a real `dsv4 serve`.
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
