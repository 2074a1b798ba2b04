#!/usr/bin/env python3
"""Our grammar masks against llguidance 1.9.1's (PyPI; installed for tests only by scripts/setup.sh).

For every grammar of the corpus (JSON schemas: objects, nested arrays, enums, anyOf, $ref, string formats,
number ranges; regexes), token sequences over the real V4 vocabulary are walked, and at every step the
set of allowed next tokens that `grammar_masks` (tests/grammar_llguidance/grammar_masks.cpp, our
src/grammar) prints must equal llguidance's LLMatcher.compute_bitmask(), EOS included. Walks are random
(a token allowed by both, uniformly) and adversarial (preferring tokens that cross JSON structure:
quotes, separators, whitespace, digits, long tokens, and ending as soon as possible).

llguidance is configured the way our grammar is (see LL_JSON_OPTIONS); the differences that remain are
each named in KNOWN_DIFFERENCES with the exact token set they cover, and every other difference fails.
Usage: test_llguidance_masks.py path/to/grammar_masks [--walks N]
"""
import json
import os
import random
import re
import subprocess
import sys
import unittest
import zlib

import llguidance

MASKS_BIN = None
WALKS = int(os.environ.get("DSV4_LLG_WALKS", "6"))  # per grammar and strategy
STEPS = 48  # tokens per walk at most

# Our JSON texts: at most 8 bytes of space, tab, CR or LF between tokens (json_syntax.h), none before
# the value or after it, and members in the schema's order. llguidance's compiler takes the same rules
# through its options: whitespace_pattern bounds each gap, and no flexible whitespace at the ends.
# Every grammar also gets llguidance's "no_forcing": without it, where the grammar forces the next bytes
# (a key's name, the rest of "maybe"), llguidance allows only the first token of their canonical
# tokenization, while we (like xgrammar) allow every token that fits the grammar.
LL_PREAMBLE = '%llguidance {"no_forcing": true}\n'
LL_JSON_OPTIONS = {
    "whitespace_flexible": False,
    "json_allow_general_unicode_escapes": True,  # \\uXXXX of any character, as ours without length bounds
    "whitespace_pattern": r"[ \t\r\n]{0,8}",
    "item_separator": ",",
    "key_separator": ":",
}

TOOL = {
    "type": "object",
    "properties": {
        "location": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 16},
        "include_hourly": {"type": "boolean"},
    },
    "required": ["location", "unit", "days", "include_hourly"],
    "additionalProperties": False,
}

SCHEMAS = {
    "tool_object": TOOL,
    "nested_arrays": {
        "type": "object",
        "properties": {
            "rows": {
                "type": "array",
                "items": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
                "maxItems": 3,
            }
        },
        "required": ["rows"],
        "additionalProperties": False,
    },
    "enums": {"type": "array", "items": {"enum": ["red", "green", 7, None, True]}, "minItems": 2, "maxItems": 4},
    "any_of": {
        "type": "object",
        "properties": {"v": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "integer"}, {"type": "null"}]}},
        "required": ["v"],
        "additionalProperties": False,
    },
    "ref_recursive": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "required": ["name", "kids"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    },
    "formats": {
        "type": "object",
        "properties": {"day": {"type": "string", "format": "date"}, "id": {"type": "string", "format": "uuid"}},
        "required": ["day", "id"],
        "additionalProperties": False,
    },
    # "email" is left out: ours is a plain dotted form (json_schema.cpp kFormats), llguidance's follows
    # RFC 5322's quoted and special-character local parts; the two differ by design, token by token.
    "date_time_ip": {
        "type": "object",
        "properties": {
            "at": {"type": "string", "format": "date-time"},
            "t": {"type": "string", "format": "time"},
            "ip": {"type": "string", "format": "ipv4"},
        },
        "required": ["at", "t", "ip"],
        "additionalProperties": False,
    },
    "number_range": {"type": "array", "items": {"type": "number", "minimum": -2, "maximum": 300}, "maxItems": 6},
    "integer_range": {"type": "array", "items": {"type": "integer", "minimum": -40, "maximum": 1250}},
    "string_lengths": {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 4}, "maxItems": 3},
}

REGEXES = {
    "phone": r"\(\d{3}\) \d{3}-\d{4}",
    "ascii_classes": r"\w{2,6}\s\d+",
    "words": r"[a-z]+( [a-z]+){0,3}\.",
    "hex_or_int": r"(0x[0-9a-f]{1,6}|-?[1-9][0-9]{0,4})",
    "alternation": r"(yes|no|maybe)!?",
}

# Our regexes' \d \w \s are ASCII (regex.h); llguidance's (Rust regex) are Unicode. The llguidance side
# gets the ASCII classes spelled out, so the comparison checks that ours are exactly those.
ASCII_CLASSES = {r"\d": "[0-9]", r"\w": "[0-9A-Za-z_]", r"\s": r"[ \t\n\r\f\v]"}


def ll_regex(pattern):
    for ours, spelled in ASCII_CLASSES.items():
        pattern = pattern.replace(ours, spelled)
    return pattern


def raw_del_in_json(kind, text, token):
    """A raw DEL (U+007F) in a JSON string: RFC 8259 requires only U+0000-U+001F, '"' and '\\' to be
    escaped, so our strings take DEL as itself; llguidance 1.9.1 refuses it raw."""
    return kind == "json_schema" and b"\x7f" in token


def solidus_escape_in_json(kind, text, token):
    """The escape \\/ (RFC 8259's escaped solidus) in a JSON string without length bounds: ours takes every
    escape JSON has there; llguidance 1.9.1 has no \\/ (its json_allowed_escapes refuses '/')."""
    return kind == "json_schema" and b"\\/" in token


NUMBER = re.compile(rb"-?([0-9]+)(\.[0-9]*)?([eE][+-]?[0-9]*)?")


def number_past_our_bounds(kind, text, token):
    """A JSON number the token makes longer than ours allow: at most 20 integer digits, 20 fraction digits
    and 2 exponent digits (json_syntax.h: a model cannot loop on digits, and every such number is a finite
    double); llguidance bounds none of them."""
    if kind != "json_schema":
        return False
    whole = text + token
    for m in NUMBER.finditer(whole):
        if m.end() <= len(text):
            continue
        frac, exp = m.group(2) or b".", m.group(3) or b"e"
        if len(m.group(1)) > 20 or len(frac) - 1 > 20 or len(exp.lstrip(b"eE+-")) > 2:
            return True
    return False


def negative_zero(kind, text, token):
    """The number -0 (JSON's minus zero, equal to 0) in a range that holds 0: ours refuses it as an integer
    when the lower bound is negative and takes it as a number, llguidance the other way round. The token
    writes the 0 of "-0", or ends the number right after it."""
    if kind != "json_schema":
        return False
    whole = text + token
    for m in NUMBER.finditer(whole):
        if m.end() >= len(text) and m.start() < len(whole) and m.group(0) == b"-0":
            return True
    return False


LEAP_SECOND = re.compile(rb"[0-9]{2}:[0-5][0-9]:6")


def leap_second(kind, text, token):
    """Second 60 in a time or date-time format: RFC 3339 allows a leap second and llguidance takes it;
    ours stops at 59, as the parsers clients validate with do (Python's datetime refuses :60)."""
    whole = text + token
    return kind == "json_schema" and any(m.end() > len(text) for m in LEAP_SECOND.finditer(whole))


SECOND_FRACTION = re.compile(rb":[0-5][0-9]\.[0-9]{10}")


def long_second_fraction(kind, text, token):
    """A fraction of a second of more than 9 digits (nanoseconds): ours bounds it, so the string's length
    is bounded; llguidance does not."""
    whole = text + token
    return kind == "json_schema" and any(m.end() > len(text) for m in SECOND_FRACTION.finditer(whole))


# The differences that stay after configuring llguidance like us: (predicate over (kind, text so far,
# token bytes), which side alone allows such tokens). Anything else must be equal.
KNOWN_DIFFERENCES = [
    (raw_del_in_json, "ours"),
    (solidus_escape_in_json, "ours"),
    (number_past_our_bounds, "llguidance"),
    (leap_second, "llguidance"),
    (long_second_fraction, "llguidance"),
    (negative_zero, "ours"),
    (negative_zero, "llguidance"),
]


class Masks:
    """Our side: the grammar_masks process."""

    def __init__(self, binary):
        self.p = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, q):
        self.p.stdin.write(json.dumps(q) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def ids_of(words, vocab, byteorder):
    """The ids whose bits are set in a mask of 32-bit words (ids past the vocabulary left out)."""
    out = set()
    for w in range(len(words) // 4):
        v = int.from_bytes(words[4 * w : 4 * w + 4], byteorder)
        while v:
            b = v & -v
            i = w * 32 + b.bit_length() - 1
            if i < vocab:
                out.add(i)
            v ^= b
    return out


def ours_ids(hex_words, vocab):
    return ids_of(bytes.fromhex(hex_words), vocab, "big")  # each word printed as 8 hex digits


def ll_ids(bitmask, vocab):
    return ids_of(bitmask, vocab, "little")  # llguidance's bytes as they lie in memory


class V4Tokens:
    """The V4 vocabulary as llguidance takes it: every id's bytes, the special ids, EOS."""

    def __init__(self, vocab):
        self.tokens = [bytes.fromhex(h) for h in vocab["tokens"]]
        self.special_token_ids = list(vocab["special"])
        self.eos_token_id = vocab["eos"]
        self.bos_token_id = None
        self.by_bytes = {}
        for i, t in enumerate(self.tokens):
            if i not in set(self.special_token_ids):
                self.by_bytes.setdefault(t, i)

    def __call__(self, s):  # greedy longest match (llguidance only needs some tokenization)
        data = s if isinstance(s, bytes) else s.encode("utf-8")
        out, i = [], 0
        while i < len(data):
            for n in range(min(16, len(data) - i), 0, -1):
                if data[i : i + n] in self.by_bytes:
                    out.append(self.by_bytes[data[i : i + n]])
                    i += n
                    break
            else:
                raise ValueError("no token for byte %r" % data[i : i + 1])
        return out


CROSSING = set(b'"{}[],: \t\n\r')


def adversarial_pick(rng, allowed, tokens, step):
    """Prefers tokens that cross JSON structure, whitespace runs and long tokens; EOS when it can."""
    scored = []
    for i in allowed:
        t = tokens[i]
        score = len(set(t) & CROSSING) * 3 + min(len(t), 8) + (4 if t[:1].isspace() else 0)
        scored.append((score, i))
    scored.sort(reverse=True)
    top = [i for _, i in scored[: max(1, len(scored) // 20)]]
    return rng.choice(top)


class LlguidanceMasks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ours = Masks(MASKS_BIN)
        vocab = cls.ours.ask({"vocab": True})
        cls.v4 = V4Tokens(vocab)
        cls.vocab = len(cls.v4.tokens)
        cls.tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(cls.v4))
        cls.compared = 0

    @classmethod
    def tearDownClass(cls):
        cls.ours.close()
        print("compared %d masks" % cls.compared, file=sys.stderr)

    def ll_matcher(self, kind, grammar):
        if kind == "json_schema":
            lark = "start: %json " + json.dumps(dict(grammar, **{"x-guidance": LL_JSON_OPTIONS}))
        else:
            lark = "start: /%s/" % ll_regex(grammar).replace("/", "\\/")
        m = llguidance.LLMatcher(self.tok, llguidance.LLMatcher.grammar_from_lark(LL_PREAMBLE + lark), log_level=0)
        self.assertFalse(m.is_error(), m.get_error())
        return m

    def unexplained(self, kind, text, ids, side):
        """The ids of a one-sided difference that no KNOWN_DIFFERENCES entry covers."""
        return {
            i
            for i in ids
            if not any(only == side and known(kind, text, self.v4.tokens[i]) for known, only in KNOWN_DIFFERENCES)
        }

    def explain(self, ids):
        return ", ".join("%d %r" % (i, self.v4.tokens[i]) for i in sorted(ids)[:8])

    def check_walk(self, kind, grammar, rng, strategy):
        """One walk: both masks at every step, then a token both allow (EOS only when nothing else is)."""
        ll = self.ll_matcher(kind, grammar)
        answer = self.ours.ask({"kind": kind, "grammar": grammar})
        self.assertNotIn("error", answer, answer.get("error"))
        eos, text = self.v4.eos_token_id, b""
        for step in range(STEPS + 1):
            ours = ours_ids(answer["mask"], self.vocab)
            theirs = ll_ids(ll.compute_bitmask(), self.vocab)
            type(self).compared += 1
            extra = self.unexplained(kind, text, ours - theirs, "ours")
            missing = self.unexplained(kind, text, theirs - ours, "llguidance")
            if extra or missing:
                self.fail(
                    "%s step %d after %r: only ours allow [%s]; only llguidance allows [%s]"
                    % (strategy, step, text, self.explain(extra), self.explain(missing))
                )
            choices = sorted((ours & theirs) - {eos})
            if not choices or step == STEPS:
                break
            pick = rng.choice(choices) if strategy == "random" else adversarial_pick(rng, choices, self.v4.tokens, step)
            self.assertTrue(ll.consume_token(pick), ll.get_error())
            answer = self.ours.ask({"advance": pick})
            self.assertTrue(answer["ok"], "our grammar refused token %d after %r" % (pick, text))
            text += self.v4.tokens[pick]

    def run_corpus(self, kind, corpus):
        for name, grammar in corpus.items():
            for strategy in ("random", "adversarial"):
                for w in range(WALKS):
                    with self.subTest(grammar=name, strategy=strategy, walk=w):
                        self.check_walk(kind, grammar, random.Random(zlib.crc32(("%s/%s/%d" % (name, strategy, w)).encode())), strategy)

    def test_json_schemas(self):
        self.run_corpus("json_schema", SCHEMAS)

    def test_regexes(self):
        self.run_corpus("regex", REGEXES)


if __name__ == "__main__":
    MASKS_BIN = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
