"""A bounded load test: `dsv4 bench serve` sends 200 concurrent streaming requests over loopback to a real
`dsv4 serve`; every request must succeed and, afterwards, /metrics must show every KV page back in the
pools (nothing running, nothing waiting, no page held)."""
import json
import subprocess
import unittest

from dsv4_server import BIN, Server


class Load(unittest.TestCase):
    def test_200_concurrent_streams(self):
        with Server() as s:
            out = subprocess.run(
                [BIN, "bench", "serve", "--base-url", s.base_url, "--dataset-name", "random", "--random-input-len",
                 "32", "--random-output-len", "16", "--num-prompts", "200", "--request-rate", "inf",
                 "--max-concurrency", "200", "--ignore-eos", "--json", "--disable-tqdm"],
                capture_output=True, text=True, timeout=600)
            self.assertEqual(out.returncode, 0, out.stderr)
            r = json.loads(out.stdout)
            self.assertEqual(r["completed"], 200, r["errors"])
            self.assertEqual(r["failed"], 0)
            self.assertEqual(r["total_output_tokens"], 200 * 16)
            self.assertEqual(r["max_concurrent_requests"], 200)
            self.assertTrue(s.wait_kv_free(10), "KV pages still held after the load")
            m = s.metrics()
            self.assertGreaterEqual(sum(v for k, v in m.items() if k.startswith("vllm:request_success_total")), 201)
            self.assertEqual(s.metric_sum("dsv4:requests_failed_total"), 0)
            self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    unittest.main()
