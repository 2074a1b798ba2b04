#!/usr/bin/env bash
# Sets up a fresh machine (scripts/setup.sh: packages + build) and runs the main job on the
# embedded default model (dsv4 serve: an OpenAI-compatible server on 127.0.0.1:8000). Extra
# arguments go to dsv4 serve.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/tools/dsv4 serve "$@"
