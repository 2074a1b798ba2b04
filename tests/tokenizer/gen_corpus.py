#!/usr/bin/env python3
"""Deterministic, varied test text for the tokenizer differential test (>= 1 MB of UTF-8).

documents(added_tokens, seed) returns a list of strings: prose, code, CJK, emoji, numbers, whitespace runs,
CR/LF mixes, added tokens inside text, odd Unicode (combining marks, ZWJ, RTL, unassigned and private-use
code points, controls), long words, random code point soup and a sweep over the assigned planes.
Run directly to write the corpus as JSON lines: gen_corpus.py TOKENIZER_JSON > corpus.jsonl"""
import json
import random
import sys
import unicodedata

WORDS = """the of and to in is was that for it as with his on be at by had are but from or have an they which one
you were her all she there would their we him been has when who will more no if out so said what up its about
into than them can only other new some could time these two may then do first any my now such like our over man
me even most made after also did many before must through back years where much your way well down should because
each just those people how too little state good very make world still own see men work long get here between
both life being under never day same another know while last might us great old year off come since against go
came right used take three tokenizer engine model prefill decode latency throughput kernel memory cache server
request stream token batch""".split()
PUNCT = [".", ",", ";", ":", "!", "?", "...", " -", " --", "—", "'s", "'t", "'re", "'ll", "n't", "(", ")", "\"", "'"]
CODE = [
    "def {f}(x, y=None):\n    \"\"\"Return {f}.\"\"\"\n    if x is None:\n        return []\n    return [x * 2 for _ in range(y or 3)]\n",
    "for (int i = 0; i < n; ++i) {{\n\tsum += a[i] * b[i];  // dot\n}}\n",
    "#include <vector>\nstd::vector<int32_t> {f}(const std::string& s) {{ return {{}}; }}\n",
    "{{\"model\": \"deepseek-v4\", \"messages\": [{{\"role\": \"user\", \"content\": \"{f}\"}}], \"max_tokens\": 128}}\n",
    "<div class=\"{f}\">\n  <a href=\"https://example.com/{f}?q=1&r=2#x\">link</a>\n</div>\n",
    "SELECT {f}, COUNT(*) FROM t WHERE x >= 10 AND y <> 'z' GROUP BY 1;\n",
    "    if err != nil {{\n        return fmt.Errorf(\"{f}: %w\", err)\n    }}\n",
    "$ cat /etc/{f}.conf | grep -E '^[a-z_]+=' | sort -u > /tmp/out.txt 2>&1\n",
    "x = {{k: v for k, v in zip(a, b) if k not in seen}}; print(f\"{{x!r:>10}}\")\n",
    "fn {f}<'a>(s: &'a str) -> Option<&'a str> {{ s.split_whitespace().next() }}\n",
]
LANG = {
    "ru": "Привет мир как дела сегодня хорошая погода Москва Россия",
    "el": "Καλημέρα κόσμε ελληνικά γράμματα Αθήνα",
    "ar": "مرحبا بالعالم كيف حالك اليوم اللغة العربية",
    "he": "שלום עולם מה שלומך היום עברית",
    "hi": "नमस्ते दुनिया आप कैसे हैं हिन्दी भाषा",
    "th": "สวัสดีชาวโลกวันนี้อากาศดีมากภาษาไทย",
    "vi": "Xin chào thế giới hôm nay trời đẹp tiếng Việt",
    "ko": "안녕하세요 세계 오늘 날씨가 좋네요 한국어",
    "ja": "こんにちは世界、今日はいい天気ですね。カタカナとひらがなと漢字",
    "zh": "你好世界，今天天气很好。我们正在测试分词器的正确性！（中文标点）“引号”《书名》",
}
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵", "1️⃣", "❤️", "🫠", "🫨", "🩷", "🫎", "🪿", "🫩", "🧑🏿‍💻",
         "👩🏻‍❤️‍💋‍👨🏼", "☺︎", "✌🏻", "🤷‍♀️", "🦀", "🐍", "🔥", "💯", "🎉"]
ODD = ["e\u0301\u0302\u0303", "a\u0308\u0308\u0308\u0308", "\u200d", "\u200c", "\u200b", "\ufeff", "\u2060",
       "\u200e", "\u200f", "\u202e", "\u202d", "\u2066", "\u2069", "\u0378", "\u0560", "\ufffe", "\uffff",
       "\U000e0041", "\U000e007f", "\ufe0f", "\ufe0e", "\U000e0100", "\ue000", "\uf8ff", "\U000f0000",
       "\U0010fffd", "\U00031350", "\U0002ebf0", "\U0001d2c0", "\U00011f00", "\u0897", "\u1c89", "\x00", "\x07",
       "\x1b", "\x7f", "\x85", "\x9f", "\u180e", "\u00ad", "\u034f", "\ufdd0", "\U0001fffe", "\ufff9"]
SPACES = [" ", "  ", "\t", "\u00a0", "\u3000", "\u2003", "\u2009", "\u202f", "\u205f", "\u1680", "\u2028", "\u2029",
          "\x0b", "\x0c", "\x85", "\u180e", "\u200b"]
NEWLINES = ["\n", "\r\n", "\r", "\n\r", "\r\r\n", "\n\n", "\n\n\n", " \n", "\t\n", "\r\n\r\n"]


def sentence(r):
    words = [r.choice(WORDS) for _ in range(r.randint(3, 18))]
    words[0] = words[0].capitalize()
    out = " ".join(words)
    if r.random() < 0.3:
        out += r.choice(PUNCT)
    return out + r.choice([".", "!", "?", ".\n", ". "])


def prose(r):
    return " ".join(sentence(r) for _ in range(r.randint(20, 60))) + "\n\n"


def code(r):
    return "".join(r.choice(CODE).format(f=r.choice(WORDS) + str(r.randint(0, 99))) for _ in range(r.randint(5, 20)))


def cjk(r):
    parts = []
    for _ in range(r.randint(20, 80)):
        kind = r.random()
        if kind < 0.4:
            parts.append("".join(chr(r.randint(0x4E00, 0x9FFF)) for _ in range(r.randint(1, 30))))
        elif kind < 0.55:
            parts.append("".join(chr(r.randint(0x3040, 0x30FF)) for _ in range(r.randint(1, 10))))
        elif kind < 0.7:
            parts.append("".join(chr(r.randint(0xAC00, 0xD7A3)) for _ in range(r.randint(1, 8))))
        elif kind < 0.85:
            parts.append(r.choice(LANG["zh"].split("，") + LANG["ja"].split("、")))
        else:
            parts.append(r.choice("，。！？、；：「」『』（）【】《》〈〉…—～·％＋－＝０１２３ＡＢＣａｂｃ"))
        if r.random() < 0.2:
            parts.append(r.choice([" ", "\n", "1234", "abc", "Ｈｅｌｌｏ"]))
    return "".join(parts)


def emoji(r):
    return "".join(r.choice(EMOJI) + r.choice(["", "", " ", "!", "abc", "\n", "1"]) for _ in range(r.randint(20, 100)))


def numbers(r):
    pieces = []
    for _ in range(r.randint(20, 80)):
        kind = r.randint(0, 7)
        if kind == 0:
            pieces.append(str(r.randint(0, 10 ** r.randint(1, 30))))
        elif kind == 1:
            pieces.append(f"{r.uniform(-1e6, 1e6):.{r.randint(0, 8)}f}")
        elif kind == 2:
            pieces.append(f"{r.random():e}")
        elif kind == 3:
            pieces.append("".join(chr(0x0660 + r.randint(0, 9)) for _ in range(r.randint(1, 7))))
        elif kind == 4:
            pieces.append("".join(chr(0xFF10 + r.randint(0, 9)) for _ in range(r.randint(1, 7))))
        elif kind == 5:
            pieces.append(r.choice(["½", "¾", "²", "³", "Ⅻ", "ⅷ", "①", "⑳", "𝟙𝟚", "٣", "१२३", "๑๒๓", "𝋀𝋁"]))
        elif kind == 6:
            pieces.append(f"{r.randint(1, 12)}/{r.randint(1, 31)}/{r.randint(1900, 2100)} {r.randint(0, 23)}:"
                          f"{r.randint(0, 59):02d}")
        else:
            pieces.append("0x" + "".join(r.choice("0123456789abcdef") for _ in range(r.randint(1, 16))))
        pieces.append(r.choice([" ", ", ", "\n", "+", "-", "*", "=", "", "a", "%"]))
    return "".join(pieces)


def whitespace(r):
    out = []
    for _ in range(r.randint(20, 60)):
        out.append(r.choice(SPACES) * r.randint(1, 12))
        out.append(r.choice(NEWLINES) * r.randint(1, 3))
        out.append(r.choice(["word", "x", "!", "1", "中文", "", "\t\tindent", "    code()", "é"]))
    return "".join(out)


def with_added_tokens(r, added):
    out = []
    for _ in range(r.randint(10, 40)):
        t = r.choice(added)
        kind = r.random()
        if kind < 0.5:
            out.append(t)
        elif kind < 0.65:
            out.append(t[: r.randint(1, max(1, len(t) - 1))])  # a prefix only
        elif kind < 0.8:
            out.append("<" + t + ">")
        else:
            out.append(t + t)
        out.append(r.choice(["", " ", "hello", "\n", "你好", sentence(r), "1", "<", "｜"]))
    return "".join(out)


def odd_unicode(r):
    out = []
    for _ in range(r.randint(30, 100)):
        out.append(r.choice(ODD) * r.randint(1, 3))
        out.append(r.choice(["a", " ", "b c", "!", "1", "中", "", "\n", "مرحبا", "שלום"]))
    return "".join(out)


def multilingual(r):
    return " ".join(r.choice(list(LANG.values())) for _ in range(r.randint(10, 40))) + "\n"


def soup(r):
    out = []
    for _ in range(r.randint(50, 300)):
        cp = r.choice([r.randint(0, 0x7F), r.randint(0x80, 0x7FF), r.randint(0x800, 0xFFFF),
                       r.randint(0x10000, 0x10FFFF), r.randint(0x1F300, 0x1FAFF)])
        if 0xD800 <= cp <= 0xDFFF:
            continue
        out.append(chr(cp))
    return "".join(out)


def long_words(r):
    return r.choice([
        "a" * r.randint(100, 3000), "ab" * r.randint(60, 500), "中" * r.randint(50, 2000),
        "".join(chr(r.randint(0x4E00, 0x9FA5)) for _ in range(r.randint(100, 1500))),
        "9" * r.randint(100, 2000), " " * r.randint(100, 5000) + "x", "!" * r.randint(100, 2000),
        "\n" * r.randint(50, 500), "é" * r.randint(100, 800), "😀" * r.randint(50, 300),
        "".join(r.choice(WORDS) for _ in range(r.randint(20, 100))),
        "\u0301" * r.randint(50, 400), "ـ" * r.randint(50, 300),
    ])


def sweep(start, stop, step=1):
    """Each code point in context: after a letter, before a digit, before punctuation, around spaces."""
    out = []
    for cp in range(start, stop, step):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        out.append(f"x{c}{c}1{c}! {c}\n")
    return "".join(out)


GENERATORS = [prose, prose, prose, code, code, cjk, emoji, numbers, whitespace, odd_unicode, multilingual, soup,
              long_words]


def documents(added, seed=1234, target_bytes=1_200_000):
    r = random.Random(seed)
    docs = []
    size = 0
    while size < target_bytes:
        gen = r.choice(GENERATORS + [lambda rr: with_added_tokens(rr, added)])
        doc = gen(r)
        if r.random() < 0.3:  # mix kinds and line endings inside one document
            doc = doc + r.choice(NEWLINES) + with_added_tokens(r, added) + r.choice(GENERATORS)(r)
        docs.append(doc)
        size += len(doc.encode("utf-8"))
    docs += ["", " ", "\n", "\r\n", "a", "<", "｜", "<｜User｜>", "<｜User｜", "<think></think>", "｜DSML｜invoke"]
    return docs


# Large blocks of one category (CJK ideographs, Hangul, Yi, Tangut, private use) are sampled, not swept.
UNIFORM_BLOCKS = [(0x3400, 0x4DC0), (0x4E00, 0xA000), (0xA000, 0xA490), (0xAC00, 0xD7A4), (0xE000, 0xF900),
                  (0x17000, 0x18800)]


def sweep_documents():
    """Every code point of planes 0-1 except inside UNIFORM_BLOCKS (every 13th there), a stride over the
    other planes, and the post-Unicode-14 blocks that the regex translator patches."""
    docs, start = [], 0
    for a, b in UNIFORM_BLOCKS:
        docs += [sweep(lo, min(lo + 512, a)) for lo in range(start, a, 512)]
        docs.append(sweep(a, b, 13))
        start = b
    docs += [sweep(lo, min(lo + 512, 0x20000)) for lo in range(start, 0x20000, 512)]
    docs += [sweep(0x20000, 0x110000, 251)]
    docs += [sweep(a, b) for a, b in [(0x2EBF0, 0x2EE60), (0x31350, 0x31400), (0x323A0, 0x323B0), (0xE0000, 0xE0200)]]
    return docs


def added_tokens(tokenizer_json):
    with open(tokenizer_json, encoding="utf-8") as f:
        return [t["content"] for t in json.load(f)["added_tokens"]]


if __name__ == "__main__":
    docs = documents(added_tokens(sys.argv[1])) + sweep_documents()
    for d in docs:
        print(json.dumps(d, ensure_ascii=False))
    print(f"{len(docs)} documents, {sum(len(d.encode()) for d in docs)} bytes, Unicode {unicodedata.unidata_version}",
          file=sys.stderr)
