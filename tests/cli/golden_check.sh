#!/usr/bin/env bash
# dsv4 golden-check on the golden sets (CPU backend): both public ones in tests/data, and any extra set
# a shared/ folder adds; end to end and block by block within tolerance.json; one JSON object on
# stdout; a missed threshold exits non-zero.
set -euo pipefail
DSV4=$1
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/../testing/test_data.sh"
mapfile -t sets < <(golden_model_sets)
names=$(for g in "${sets[@]}"; do basename "$g"; done | tr '\n' ' ')
for want in tiny-a tiny-b; do
  grep -qw -- "$want" <<<"$names" || fail "the public golden set $want is missing from $DATA (found: $names)"
done
for g in "${sets[@]}"; do
  set=$(basename "$g")
  out=$("$DSV4" golden-check "$g" 2>/dev/null) || fail "$g: golden-check failed: $out"
  python3 - "$set" "$out" <<'PY'
import json, sys
name, out = sys.argv[1], sys.argv[2]
j = json.loads(out)
assert list(j) == ["numerics", "parallel", "rms_ratio", "argmax_agreement", "blocks", "pass"], j
assert j["parallel"] == "tp 1 x dp 1", j
assert j["numerics"] == "exact", j
assert j["pass"] is True and len(j["blocks"]) >= 1, j
assert name not in ("tiny-a", "tiny-b") or len(j["blocks"]) == 4, j
print(f"{name}: rms_ratio {j['rms_ratio']:.4f} argmax {j['argmax_agreement']:.3f} blocks "
      + " ".join(f"{b['rms_rel']:.5f}" for b in j["blocks"]))
PY
done
# Decode steps padded to their recorded shape (what CUDA graphs replay) give the eager steps' numbers.
for g in "${sets[@]}"; do
  set=$(basename "$g")
  eager=$("$DSV4" golden-check "$g" --no-blocks --step-mode eager 2>/dev/null) || fail "$set eager: $eager"
  padded=$("$DSV4" golden-check "$g" --no-blocks --step-mode padded 2>/dev/null) || fail "$set padded: $padded"
  [ "$eager" = "$padded" ] || fail "$set: padded decode steps differ from eager ones: $padded vs $eager"
done
# The CPU backend is exact only: asked for the fast tier it refuses, naming the exact tier.
set +e
err=$("$DSV4" golden-check "$DATA/golden/tiny-a" --no-blocks --numerics fast 2>&1 >/dev/null)
rc=$?
set -e
[ $rc -ne 0 ] || fail "--numerics fast on the CPU backend must fail"
grep -q "exact tier only" <<<"$err" || fail "the refusal must name the exact tier: $err"
# A threshold that no implementation meets must fail, with exit code 3 and pass=false.
set +e
out=$("$DSV4" golden-check "$DATA/golden/tiny-a" --no-blocks --max-rms-ratio 0.001 2>/dev/null)
rc=$?
set -e
[ $rc -eq 3 ] || fail "expected exit 3 for a missed threshold, got $rc"
grep -q '"pass":false' <<<"$out" || fail "expected pass=false: $out"
# The replay gate's plumbing on CPU against CPU: every op fed the other run's outputs, every gate met
# (the same bits), one JSON verdict; --replay without --compare-ops is refused.
out=$("$DSV4" golden-check "$DATA/golden/tiny-a" --no-blocks --compare-ops cpu --replay 2>/dev/null) ||
  fail "replay CPU against CPU failed: $out"
grep -q '^{"numerics":"exact","replay":true,"calls":[1-9][0-9]*,"pass":true}$' <<<"$out" || fail "replay verdict: $out"
grep -q '^op linear .*worst 0.000e+00' <<<"$out" || fail "replay must list the linear calls, equal: $out"
grep -q '^op kv_insert .*pass$' <<<"$out" || fail "replay must judge the table writes: $out"
set +e
err=$("$DSV4" golden-check "$DATA/golden/tiny-a" --replay 2>&1 >/dev/null)
rc=$?
set -e
[ $rc -ne 0 ] && grep -q "needs --compare-ops" <<<"$err" || fail "--replay alone must be refused: $err"
echo "golden_check: ok ($names)"
