"""/metrics against a real `dsv4 serve` (the embedded model), read with prometheus_client's own parser:

- prefix reuse by default: a prompt sharing 700 tokens with an earlier one gets 512 cached tokens
  (usage.prompt_tokens_details.cached_tokens), served on every KV group;
- the exposition parses into vLLM's families (vllm_metric_families.json: names, types, label sets), each
  family once (a counter declared without `_total` over `_total` samples would split in two);
- the request-level histograms count the requests sent;
- every query of deploy/grafana/dsv4-dashboard.json names a family the server exports.
"""
import json
import os
import random
import re
import time
import unittest

from prometheus_client.parser import text_string_to_metric_families

from dsv4_server import ServerTestCase

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SEED = int.from_bytes(os.urandom(4), "little")


def families(text):
    return list(text_string_to_metric_families(text))


def by_name(fams):
    return {f.name: f for f in fams}


def eventually(read, done, timeout=5):
    """read() until done(value) or the timeout: the engine publishes its counters just after the step that
    ended a request, so a response can arrive a moment before /metrics counts it."""
    deadline = time.time() + timeout
    value = read()
    while not done(value) and time.time() < deadline:
        time.sleep(0.05)
        value = read()
    return value


def label_names(fam):
    names = set()
    for s in fam.samples:
        names |= set(s.labels) - {"le"}
    return names


class Metrics(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.rng = random.Random(SEED)
        _, body = cls.server.get("/v1/models")
        cls.vocab = json.loads(body)["data"][0]["vocab_size"]

    def ids(self, n):
        return [self.rng.randrange(1000, self.vocab - 1000) for _ in range(n)]

    def complete(self, prompt, **extra):
        status, body = self.server.request("POST", "/v1/completions",
                                           {"prompt": prompt, "max_tokens": 2, "temperature": 0, **extra}, timeout=300)
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def group_hits(self):
        fam = by_name(families(self.server.get("/metrics")[1]))["dsv4:kv_group_prefix_hits"]
        return {s.labels["group"]: s.value for s in fam.samples}

    def test_a_shared_block_hits_on_every_group(self):
        shared = self.ids(700)
        first = self.complete(shared + self.ids(300))  # its last prompt block starts at 768
        self.assertEqual(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0, f"seed {SEED}")
        before = self.group_hits()
        second = self.complete(shared + self.ids(200))
        self.assertEqual(second["usage"]["prompt_tokens_details"]["cached_tokens"], 512, f"seed {SEED}")
        after = eventually(self.group_hits, lambda a: all(a[g] - before[g] == 512 for g in a))
        self.assertGreaterEqual(len(after), 5)
        for group, hits in after.items():
            self.assertEqual(hits - before[group], 512, f"group {group}, seed {SEED}")

    def test_families_are_vllms(self):
        self.complete(self.ids(40), n=2)
        self.server.request("POST", "/v1/chat/completions",
                            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}, timeout=300)
        text = self.server.get("/metrics")[1]
        fams = families(text)
        names = [f.name for f in fams]
        self.assertEqual(len(names), len(set(names)), "a family is split or repeated")
        got = by_name(fams)
        with open(os.path.join(HERE, "vllm_metric_families.json")) as f:
            want = json.load(f)["families"]
        for w in want:
            self.assertIn(w["name"], got, f"vLLM's {w['name']} is missing")
            fam = got[w["name"]]
            self.assertEqual(fam.type, w["type"], w["name"])
            self.assertEqual(sorted(label_names(fam)), w["labels"], w["name"])
        for fam in fams:
            self.assertNotIn(fam.type, ("unknown", "untyped"), fam.name)
        # The per-KV-group hit rates stay beside vLLM's families.
        rate = got["dsv4:kv_group_prefix_hit_rate"]
        self.assertEqual(label_names(rate), {"model_name", "engine", "group", "pool"})
        self.assertGreaterEqual(len(rate.samples), 5)

    def test_request_histograms_count_requests(self):
        def histogram_count(fams, name):
            return sum(s.value for s in by_name(fams)[name].samples if s.name == name + "_count")

        before = families(self.server.get("/metrics")[1])
        for _ in range(3):
            self.complete(self.ids(30), max_tokens=4, ignore_eos=True)
        self.complete(self.ids(30), n=3, max_tokens=4, ignore_eos=True)
        after = eventually(lambda: families(self.server.get("/metrics")[1]),
                           lambda a: histogram_count(a, "vllm:request_queue_time_seconds") -
                           histogram_count(before, "vllm:request_queue_time_seconds") >= 6)
        for name, want in [("vllm:request_queue_time_seconds", 6), ("vllm:request_prefill_time_seconds", 6),
                           ("vllm:request_decode_time_seconds", 6), ("vllm:request_inference_time_seconds", 6),
                           ("vllm:request_prompt_tokens", 6), ("vllm:request_generation_tokens", 6),
                           ("vllm:request_params_max_tokens", 6), ("vllm:request_time_per_output_token_seconds", 6),
                           ("vllm:request_params_n", 4), ("vllm:request_max_num_generation_tokens", 4)]:
            self.assertEqual(histogram_count(after, name) - histogram_count(before, name), want, name)
        gen = by_name(after)["vllm:request_generation_tokens"]
        sums = {s.name: s.value for s in gen.samples}
        self.assertGreaterEqual(sums["vllm:request_generation_tokens_sum"], 6 * 4)
        self.assertGreater(histogram_count(after, "vllm:iteration_tokens_total"),
                           histogram_count(before, "vllm:iteration_tokens_total"))

    def test_dashboard_queries_name_exported_families(self):
        exported = by_name(families(self.server.get("/metrics")[1]))
        samples = {s.name for f in exported.values() for s in f.samples}
        with open(os.path.join(REPO, "deploy", "grafana", "dsv4-dashboard.json")) as f:
            dashboard = json.load(f)
        exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        self.assertGreaterEqual(len(exprs), 20)
        for expr in exprs:
            named = re.findall(r"\b((?:vllm|dsv4):[a-zA-Z0-9_:]+)", expr)
            self.assertTrue(named, expr)
            for name in named:
                self.assertTrue(name in samples or name in exported, f"{name} (in {expr}) is not exported")


if __name__ == "__main__":
    unittest.main()
