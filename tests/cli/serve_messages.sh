#!/usr/bin/env bash
# Anthropic's Messages API (POST /v1/messages) through the official anthropic client against a real
# `dsv4 serve` (tests/e2e/test_messages.py): the same prompt and answer as chat, events, tools, errors.
set -euo pipefail
source "$(dirname "$0")/../testing/e2e.sh"
run_e2e "$1" test_messages "anthropic, openai, jsonschema"
