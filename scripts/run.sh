#!/usr/bin/env bash
# Sets up a fresh machine (scripts/setup.sh: packages + build) and runs the main job on the
# embedded default model. Extra arguments go to the command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/tools/dsv4 inspect "$@"
