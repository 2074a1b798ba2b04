#!/usr/bin/env bash
# The Responses API (POST /v1/responses) through the official OpenAI client against a real `dsv4 serve`
# (tests/e2e/test_responses.py): the same prompt and answer as chat, streamed events, tools, refusals.
set -euo pipefail
source "$(dirname "$0")/../testing/e2e.sh"
run_e2e "$1" test_responses "openai, jsonschema"
