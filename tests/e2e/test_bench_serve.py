"""`dsv4 bench serve` against a real `dsv4 serve` (the embedded model):

- the prefix_repetition dataset (N prefixes of L tokens) reaches at least 95% of the ideal hit rate the
  tool computes for it (the server's usage.prompt_tokens_details.cached_tokens, summed);
- the chat endpoint gets chat bodies (a completions body there is a 400: every request must succeed);
- a JSONL file dataset, --save-result (vLLM's file name in --result-dir, with an SVG beside it) and --plot;
- the SVG parses as XML and holds the TTFT, TPOT, ITL CDFs and the throughput series, whose points,
  mapped back through each plot area's range, are the result JSON's latencies.
"""
import glob
import json
import os
import subprocess
import tempfile
import unittest
import xml.etree.ElementTree as ET

from dsv4_server import BIN, ServerTestCase

SVG = "{http://www.w3.org/2000/svg}"
SEED = int.from_bytes(os.urandom(4), "little")


def bench(base_url, *args):
    cmd = [BIN, "bench", "serve", "--base-url", base_url, "--disable-tqdm", "--seed", str(SEED), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return out


class BenchServe(ServerTestCase):
    def run_json(self, *args):
        out = bench(self.server.base_url, "--json", *args)
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)

    def test_prefix_repetition_reaches_the_ideal_hit_rate(self):
        r = self.run_json("--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "700",
                          "--prefix-repetition-suffix-len", "60", "--prefix-repetition-num-prefixes", "3",
                          "--prefix-repetition-output-len", "3", "--num-prompts", "18", "--max-concurrency", "1")
        self.assertEqual(r["completed"], 18, r["errors"])
        self.assertEqual(r["dataset_name"], "prefix_repetition")
        ideal = r["ideal_prefix_cache_hit_rate"]
        # 700 shared tokens = 2 blocks (512) of 760; 18 prompts, at most 3 first uses (one warmed by the probe).
        self.assertAlmostEqual(ideal, (18 - 2) * 512 / (18 * 760), delta=512 / (18 * 760) + 1e-9)
        self.assertGreaterEqual(r["prefix_cache_hit_rate"], 0.95 * ideal, f"seed {SEED}: {r['cached_tokens']}")
        self.assertEqual(sum(r["cached_tokens"]), r["total_cached_tokens"])

    def test_chat_endpoint_sends_messages(self):
        r = self.run_json("--endpoint", "/v1/chat/completions", "--dataset-name", "random", "--random-input-len", "24",
                          "--random-output-len", "4", "--num-prompts", "6", "--ignore-eos")
        self.assertEqual(r["completed"], 6, r["errors"])
        self.assertEqual(r["endpoint"], "/v1/chat/completions")
        self.assertEqual(r["total_output_tokens"], 24)
        self.assertIsNone(r["ideal_prefix_cache_hit_rate"])  # the server tokenizes chat text its own way

    def test_file_dataset_save_result_and_svg(self):
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "prompts.jsonl")
            with open(data, "w") as f:
                for i in range(8):
                    f.write(json.dumps({"prompt": f"Question {i}: what is {i} plus {SEED % 97}?", "output_tokens": 5})
                            + "\n")
            results = os.path.join(tmp, "results")
            plot = os.path.join(tmp, "plot.svg")
            out = bench(self.server.base_url, "--endpoint", "/v1/chat/completions", "--dataset-name", "custom",
                        "--dataset-path", data, "--ignore-eos", "--max-concurrency", "3", "--save-result",
                        "--result-dir", results, "--plot", plot)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("Serving Benchmark Result", out.stdout)
            saved = glob.glob(os.path.join(results, "openai-chat-infqps-concurrency3-*.json"))
            self.assertEqual(len(saved), 1, os.listdir(results))
            with open(saved[0]) as f:
                r = json.load(f)
            self.assertEqual(r["completed"], 8, r["errors"])
            self.assertEqual(r["total_output_tokens"], 40)
            self.assertTrue(all(n > 8 for n in r["input_lens"]), r["input_lens"])  # server-counted, template included
            self.check_svg(plot, r)

    def check_svg(self, path, r):
        root = ET.parse(path).getroot()  # well-formed XML, or this raises
        self.assertEqual(root.tag, SVG + "svg")
        panels = {g.get("id"): g for g in root.iter(SVG + "g") if g.get("class") == "panel"}
        self.assertEqual(set(panels), {"ttft", "tpot", "itl", "throughput"})
        series = {}
        for pid, g in panels.items():
            area = g.find(SVG + "rect[@class='plot-area']")
            lines = g.findall(SVG + "polyline[@class='series']")
            self.assertEqual(len(lines), 1, pid)
            series[lines[0].get("id")] = (area, self.points(lines[0]))
        self.assertEqual(set(series), {"ttft-cdf", "tpot-cdf", "itl-cdf", "throughput-output"})
        # The TTFT CDF: one point per request, mapped back to milliseconds and shares.
        area, pts = series["ttft-cdf"]
        xs = [self.unmap(area, x, y)[0] for x, y in pts]
        ys = [self.unmap(area, x, y)[1] for x, y in pts]
        want = sorted(t * 1000 for t in r["ttfts"])
        self.assertEqual(len(xs), len(want))
        x_tol = float(area.get("data-x-max")) / float(area.get("width")) * 0.02
        for got, w in zip(xs, want):
            self.assertAlmostEqual(got, w, delta=x_tol)
        self.assertAlmostEqual(ys[-1], 1.0, delta=0.01)
        self.assertEqual(ys, sorted(ys))
        _, itl = series["itl-cdf"]
        self.assertEqual(len(itl), sum(len(g) for g in r["itls"]))
        _, tput = series["throughput-output"]
        self.assertGreater(len(tput), 1)

    @staticmethod
    def points(polyline):
        return [tuple(float(v) for v in p.split(",")) for p in polyline.get("points").split()]

    @staticmethod
    def unmap(area, px, py):
        x0, y0 = float(area.get("x")), float(area.get("y"))
        w, h = float(area.get("width")), float(area.get("height"))
        xmin, xmax = float(area.get("data-x-min")), float(area.get("data-x-max"))
        ymin, ymax = float(area.get("data-y-min")), float(area.get("data-y-max"))
        return xmin + (px - x0) / w * (xmax - xmin), ymin + (y0 + h - py) / h * (ymax - ymin)


if __name__ == "__main__":
    unittest.main()
