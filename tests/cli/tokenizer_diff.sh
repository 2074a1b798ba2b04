#!/usr/bin/env bash
# dsv4 tokenize against Hugging Face tokenizers on the same tokenizer.json (tests/tokenizer/diff_hf.py).
# Usage: tokenizer_diff.sh DSV4_BINARY   (DSV4_SRC = repository root)
set -euo pipefail
exec python3 "${DSV4_SRC:?}/tests/tokenizer/diff_hf.py" --dsv4 "$1"
