# Sourced by the tests/cli scripts: where the test data is.
#   DATA   the repository's tests/data (DSV4_DATA overrides it): always there, never skipped.
#   EXTRA  an optional shared/ folder (DSV4_SHARED, default ../shared): its golden sets that tests/data
#          lacks are checked too.
DATA=${DSV4_DATA:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../data" && pwd)}
EXTRA=${DSV4_SHARED:-../shared}
[ -f "$DATA/golden/tiny-a/config.json" ] || { echo "FAIL: no test data at $DATA (the repository's tests/data)"; exit 1; }

# The model golden sets (folders with a tolerance.json), one path a line: the repository's, then the
# extra ones whose names the repository lacks.
golden_model_sets() {
  local d
  for d in "$DATA"/golden/*/ "$EXTRA"/golden/*/; do
    [ -f "$d/tolerance.json" ] || continue
    case $d in "$EXTRA"/*) [ -d "$DATA/golden/$(basename "$d")" ] && continue ;; esac
    echo "${d%/}"
  done
}
