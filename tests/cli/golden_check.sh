#!/usr/bin/env bash
# dsv4 golden-check on both public golden sets (CPU backend): end to end and block by block within
# tolerance.json; one JSON object on stdout; a missed threshold exits non-zero.
set -euo pipefail
DSV4=$1
SHARED=${DSV4_SHARED:-../shared}
fail() { echo "FAIL: $*"; exit 1; }
[ -d "$SHARED/golden/tiny-a" ] || { echo "SKIP: no golden sets at $SHARED/golden (a clone without ../shared)"; exit 77; }
for set in tiny-a tiny-b; do
  out=$("$DSV4" golden-check "$SHARED/golden/$set" 2>/dev/null) || fail "$set: golden-check failed: $out"
  python3 - "$set" "$out" <<'PY'
import json, sys
name, out = sys.argv[1], sys.argv[2]
j = json.loads(out)
assert list(j) == ["numerics", "rms_ratio", "argmax_agreement", "blocks", "pass"], j
assert j["numerics"] == "exact", j
assert j["pass"] is True and len(j["blocks"]) == 4, j
print(f"{name}: rms_ratio {j['rms_ratio']:.4f} argmax {j['argmax_agreement']:.3f} blocks "
      + " ".join(f"{b['rms_rel']:.5f}" for b in j["blocks"]))
PY
done
# Decode steps padded to their recorded shape (what CUDA graphs replay) give the eager steps' numbers.
for set in tiny-a tiny-b; do
  eager=$("$DSV4" golden-check "$SHARED/golden/$set" --no-blocks --step-mode eager 2>/dev/null) || fail "$set eager: $eager"
  padded=$("$DSV4" golden-check "$SHARED/golden/$set" --no-blocks --step-mode padded 2>/dev/null) || fail "$set padded: $padded"
  [ "$eager" = "$padded" ] || fail "$set: padded decode steps differ from eager ones: $padded vs $eager"
done
# The CPU backend is exact only: asked for the fast tier it refuses, naming the exact tier.
set +e
err=$("$DSV4" golden-check "$SHARED/golden/tiny-a" --no-blocks --numerics fast 2>&1 >/dev/null)
rc=$?
set -e
[ $rc -ne 0 ] || fail "--numerics fast on the CPU backend must fail"
grep -q "exact tier only" <<<"$err" || fail "the refusal must name the exact tier: $err"
# A threshold that no implementation meets must fail, with exit code 3 and pass=false.
set +e
out=$("$DSV4" golden-check "$SHARED/golden/tiny-a" --no-blocks --max-rms-ratio 0.001 2>/dev/null)
rc=$?
set -e
[ $rc -eq 3 ] || fail "expected exit 3 for a missed threshold, got $rc"
grep -q '"pass":false' <<<"$out" || fail "expected pass=false: $out"
echo "golden_check: ok"
