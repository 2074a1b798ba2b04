#!/usr/bin/env bash
# Structured output and forced tool calls through the official OpenAI client against a real `dsv4 serve`
# (tests/e2e/test_structured_output.py; jsonschema validates the answers).
set -euo pipefail
DSV4_BIN=$(realpath "$1")
export DSV4_BIN
python3 -c 'import openai, jsonschema' 2>/dev/null || { echo "serve_structured_output: the openai and jsonschema packages are missing (scripts/setup.sh installs them)"; exit 1; }
cd "${DSV4_SRC:-$(dirname "$0")/../..}/tests/e2e"
exec python3 -m unittest -v test_structured_output 2>&1
