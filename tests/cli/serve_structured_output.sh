#!/usr/bin/env bash
# Structured output and forced tool calls through the official OpenAI client against a real `dsv4 serve`
# (tests/e2e/test_structured_output.py; jsonschema validates the answers).
set -euo pipefail
source "$(dirname "$0")/../testing/e2e.sh"
run_e2e "$1" test_structured_output "openai, jsonschema"
