"""The prefix cache's host tier (--kv-offload-bytes) against a real `dsv4 serve` (the embedded model):
a prompt whose blocks other prompts pushed out of the device pools comes back from the host tier (a hit
counted per tier and per group, a restore timed) and greedy decoding from the restored blocks gives the
tokens of the cold run (restore == recompute). The device tier is sized to hold a few prompts only, the
host tier (24 MiB) the workload's ~13 MB of offloads with little room to spare, which only a split over
the buckets as prefixes spend bytes allows (split like the device pools, a 64 MiB tier evicted the first
prompt's pages while it stood 13% full).
"""
import json
import os
import random
import unittest

from dsv4_server import Server, ServerTestCase

SEED = int.from_bytes(os.urandom(4), "little")
PROMPT = 3000  # tokens a prompt: 11 whole blocks
FILLERS = 8    # prompts after the first: more than the device tier holds


class HostTier(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        # The exact tier: restore == recompute is a bit-for-bit claim, which the fast tier's GEMMs (routes by
        # row count: a warm prompt's shorter tail runs other kernels than its cold chunks) do not make.
        cls.server = Server("--max-num-seqs", "1", "--max-num-batched-tokens", "512", "--max-model-len", "4096",
                            "--kv-offload-bytes", "24MiB", "--numerics", "exact", kv_cache_memory="8MiB")
        cls.rng = random.Random(SEED)
        _, body = cls.server.get("/v1/models")
        cls.vocab = json.loads(body)["data"][0]["vocab_size"]

    def ids(self, n):
        return [self.rng.randrange(1000, self.vocab - 1000) for _ in range(n)]

    def complete(self, prompt, max_tokens):
        status, body = self.server.request(
            "POST", "/v1/completions",
            {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}, timeout=600)
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def test_an_evicted_prefix_comes_back_and_decodes_as_the_cold_run(self):
        first = self.ids(PROMPT)
        cold = self.complete(first, 12)
        for _ in range(FILLERS):
            self.complete(self.ids(PROMPT), 1)
        self.assertTrue(self.server.wait_kv_free())
        m = self.server.metrics()
        name = lambda k: k.split("{")[0]
        offloaded = sum(v for k, v in m.items() if name(k) == "dsv4:kv_host_tier_offload_bytes_total")
        self.assertGreater(offloaded, 0, f"the fillers must have pushed blocks to the host tier (seed {SEED})")
        hits_before = self.server.metric_sum("dsv4:kv_host_tier_hits_total")
        warm = self.complete(first, 12)
        self.assertEqual(self.server.metric_sum("dsv4:kv_host_tier_hits_total"), hits_before + 1, f"seed {SEED}")
        self.assertGreater(warm["usage"]["prompt_tokens_details"]["cached_tokens"], 0, f"seed {SEED}")
        self.assertEqual(warm["choices"][0]["text"], cold["choices"][0]["text"], f"restore != recompute (seed {SEED})")
        m = self.server.metrics()
        restored = {k: v for k, v in m.items() if name(k) == "dsv4:kv_group_host_restored_blocks_total"}
        self.assertGreaterEqual(len(restored), 5, restored)
        self.assertTrue(any(v > 0 for v in restored.values()), restored)
        self.assertGreaterEqual(self.server.metric_sum("dsv4:kv_host_tier_restore_seconds_count"), 1)
        # The copies timed apart from the lookups, for the restores' bandwidth.
        self.assertGreater(self.server.metric_sum("dsv4:kv_host_tier_restore_copy_seconds_total"), 0)


if __name__ == "__main__":
    unittest.main()
