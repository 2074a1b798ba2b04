"""Random chat cases encoded by DeepSeek's official encoder, for the C++ port's differential test.

Usage: PYTHONPATH=<dir with encoding/encoding_dsv4.py of the V4 release> \
       python3 make_encoding_cases.py SEED COUNT > official_random_cases.jsonl
Each line is a case object as in shared/golden/encoding/cases/ (messages, thinking_mode,
reasoning_effort, drop_thinking, add_default_bos_token, optional context, expected). Inputs the
official encoder rejects are skipped.
"""
import json
import random
import sys

import encoding_dsv4 as E

R = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
ALPH = list("abcXYZ 019_-.,:;!?'\"\\/\n\t\r{}[]<>|") + ["\x00", "\x01", "\x1f", "\x7f", "é", "中文", "😀", "｜", "\u2028", "<think>", "</think>", "<｜User｜>"]

def rstr(n=12):
    return "".join(R.choice(ALPH) for _ in range(R.randint(0, n)))

def rfloat():
    c = R.random()
    if c < 0.2: return float(R.randint(-1000, 1000))
    if c < 0.4: return R.uniform(-1, 1)
    if c < 0.5: return R.choice([0.1, 1e16, 1e15, 123456789012345678.0, 1e-4, 1e-5, 0.0001234, 5e-324, 1.7976931348623157e308, -0.0, 0.0, 1e22, 1e21])
    return R.uniform(-1, 1) * 10 ** R.randint(-30, 30)

def rval(d=0):
    c = R.random()
    if d > 2 or c < 0.5:
        return R.choice([None, True, False, R.randint(-2**63, 2**63 - 1), R.randint(-100, 100), rfloat(), rstr(), rfloat()])
    if c < 0.75:
        return [rval(d + 1) for _ in range(R.randint(0, 3))]
    return {rstr(6): rval(d + 1) for _ in range(R.randint(0, 3))}

def rtool():
    return {"type": "function", "function": {"name": rstr(8), "description": rstr(), "parameters": rval()}}

def rargs():
    c = R.random()
    if c < 0.15: return rstr()  # maybe invalid json
    d = {rstr(6): rval() for _ in range(R.randint(0, 4))}
    return json.dumps(d, ensure_ascii=R.random() < 0.5, separators=R.choice([None, (",", ":")]))

def rmsg(ids):
    role = R.choice(["system", "user", "user", "assistant", "assistant", "tool", "tool", "developer", "latest_reminder"])
    m = {"role": role}
    if role in ("system", "user", "assistant") and R.random() < 0.9:
        m["content"] = R.choice([rstr(), None, ""])
    if role == "developer":
        m["content"] = rstr() + "x"
    if role == "latest_reminder":
        m["content"] = rstr()
    if role in ("system", "developer", "user") and R.random() < 0.3:
        m["tools"] = R.choice([[], [rtool() for _ in range(R.randint(1, 3))]])
    if role in ("system", "developer") and R.random() < 0.2:
        m["response_format"] = rval()
    if role == "assistant":
        if R.random() < 0.6: m["reasoning_content"] = R.choice([rstr(), None])
        if R.random() < 0.5:
            calls = []
            for _ in range(R.randint(0, 3)):
                tc = {"type": "function", "function": {"name": rstr(6), "arguments": rargs()}}
                if R.random() < 0.8:
                    tc["id"] = R.choice(ids)
                calls.append(tc)
            m["tool_calls"] = calls
        if R.random() < 0.1: m["wo_eos"] = R.choice([True, False])
    if role == "tool":
        if R.random() < 0.8: m["tool_call_id"] = R.choice(ids)
        m["content"] = R.choice([rstr(), [{"type": "text", "text": rstr()}, {"type": "image"}], [{"type": "text", "text": rstr()}]])
    if role in ("user", "system", "assistant") and R.random() < 0.1:
        m["task"] = R.choice(list(E.VALID_TASKS))
    if role == "user" and R.random() < 0.1: m["wo_eos"] = True
    return m

out = []
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
while len(out) < n:
    ids = ["c%d" % i for i in range(4)]
    msgs = [rmsg(ids) for _ in range(R.randint(1, 8))]
    ctx = [rmsg(ids) for _ in range(R.randint(0, 3))] if R.random() < 0.2 else None
    case = {"messages": msgs, "thinking_mode": R.choice(["chat", "thinking"]),
            "reasoning_effort": R.choice([None, "high", "max"]), "drop_thinking": R.random() < 0.7,
            "add_default_bos_token": R.random() < 0.9}
    if ctx is not None: case["context"] = ctx
    try:
        exp = E.encode_messages(json.loads(json.dumps(msgs)), thinking_mode=case["thinking_mode"], context=json.loads(json.dumps(ctx)) if ctx else None,
                                drop_thinking=case["drop_thinking"], add_default_bos_token=case["add_default_bos_token"],
                                reasoning_effort=case["reasoning_effort"])
    except Exception as e:
        continue
    case["expected"] = exp
    out.append(case)
for c in out:
    print(json.dumps(c, ensure_ascii=R.random() < 0.5))
