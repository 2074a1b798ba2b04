#!/usr/bin/env bash
# The prefix cache's host tier through a real `dsv4 serve` (tests/e2e/test_host_tier.py): an evicted
# prefix restored from host memory decodes as the cold run did.
set -euo pipefail
source "$(dirname "$0")/../testing/e2e.sh"
run_e2e "$1" test_host_tier
