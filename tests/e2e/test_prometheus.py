"""Debian's Prometheus against a real `dsv4 serve` with deploy/prometheus/alerts.yml:

- promtool checks the rules and runs their unit tests (alerts_test.yml: each alert with its real windows);
- Prometheus scrapes the live server every second and evaluates the same rules with every duration
  scaled down 60 times (10m -> 10s: the only change, checked), so that they act within the test;
- while prompts share their prefixes the hit-rate alert stays silent; when the test sends prompts that
  share nothing, the hit rate falls and PrefixCacheHitRateLow fires;
- every query of the Grafana dashboard evaluates without error at that Prometheus.
"""
import json
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

from dsv4_server import Server

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RULES = os.path.join(REPO, "deploy", "prometheus", "alerts.yml")
RULES_TEST = os.path.join(REPO, "deploy", "prometheus", "alerts_test.yml")
DASHBOARD = os.path.join(REPO, "deploy", "grafana", "dsv4-dashboard.json")
SEED = int.from_bytes(os.urandom(4), "little")
DURATION = re.compile(r"(\[|for: )(\d+)([smh])\b")
SECONDS = {"s": 1, "m": 60, "h": 3600}


def scale_durations(text, factor):
    """Every range selector and `for:` of the rules divided by factor (in whole seconds, at least 1)."""
    return DURATION.sub(lambda m: f"{m.group(1)}{max(1, int(m.group(2)) * SECONDS[m.group(3)] // factor)}s", text)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode())


class Prometheus(unittest.TestCase):
    def test_rules_check_and_unit_tests(self):
        for cmd in (["promtool", "check", "rules", RULES], ["promtool", "test", "rules", RULES_TEST]):
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_scaling_changes_only_durations(self):
        with open(RULES) as f:
            text = f.read()
        scaled = scale_durations(text, 60)
        self.assertNotEqual(scaled, text)
        self.assertEqual(DURATION.sub("D", scaled), DURATION.sub("D", text))
        self.assertIn("[10s]", scaled)
        self.assertIn("for: 10s", scaled)

    def test_hit_rate_alert_fires_on_a_live_server(self):
        with Server() as server, tempfile.TemporaryDirectory() as tmp:
            prom = self.start_prometheus(server.port, tmp)
            try:
                self.drive_and_watch(server, prom)
            finally:
                prom["proc"].terminate()
                prom["proc"].wait(timeout=30)
                prom["log_file"].close()

    def start_prometheus(self, target_port, tmp):
        with open(RULES) as f:
            rules = scale_durations(f.read(), 60)
        with open(os.path.join(tmp, "alerts.yml"), "w") as f:
            f.write(rules)
        config = (f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - alerts.yml\n"
                  f"scrape_configs:\n  - job_name: dsv4\n    static_configs:\n"
                  f"      - targets: ['127.0.0.1:{target_port}']\n")
        with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
            f.write(config)
        check = subprocess.run(["promtool", "check", "config", os.path.join(tmp, "prometheus.yml")],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        port = free_port()
        log = open(os.path.join(tmp, "prometheus.log"), "w")
        proc = subprocess.Popen(["prometheus", f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/data",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                urllib.request.urlopen(url + "/-/ready", timeout=2)
                return {"proc": proc, "url": url, "log_file": log}
            except OSError:
                time.sleep(0.2)
        proc.kill()
        log.close()
        self.fail("prometheus did not become ready:\n" + open(os.path.join(tmp, "prometheus.log")).read())

    def alert_state(self, prom, name):
        alerts = get_json(prom["url"] + "/api/v1/alerts")["data"]["alerts"]
        return [a["state"] for a in alerts if a["labels"]["alertname"] == name]

    def query(self, prom, expr):
        q = urllib.parse.urlencode({"query": expr})
        return get_json(f"{prom['url']}/api/v1/query?{q}")

    def send_traffic(self, server, prompts, stop):
        """Sends the prompts in turn (2 output tokens each) until stop is set."""
        i = 0
        while not stop.is_set():
            server.request("POST", "/v1/completions", {"prompt": prompts[i % len(prompts)], "max_tokens": 2},
                           timeout=120)
            i += 1

    def run_traffic(self, server, prompts_fn, seconds, watch):
        stop = threading.Event()
        t = threading.Thread(target=lambda: self.send_traffic(server, prompts_fn(), stop))
        t.start()
        try:
            return watch(time.time() + seconds)
        finally:
            stop.set()
            t.join(timeout=180)

    def drive_and_watch(self, server, prom):
        rng = random.Random(SEED)
        vocab = json.loads(server.get("/v1/models")[1])["data"][0]["vocab_size"]
        ids = lambda n: [rng.randrange(1000, vocab - 1000) for _ in range(n)]
        shared = ids(512)
        # Phase 1: every prompt shares 512 tokens with the first (two blocks of its 560): about 90% hits.
        def silent_while_hitting(deadline):
            states = []
            while time.time() < deadline:
                states += self.alert_state(prom, "PrefixCacheHitRateLow")
                time.sleep(1)
            return states
        states = self.run_traffic(server, lambda: [shared + ids(48) for _ in range(50)], 20, silent_while_hitting)
        self.assertEqual(states, [], f"the alert was {states} while prompts shared their prefix (seed {SEED})")
        hit_rate = self.query(prom, "sum(rate(vllm:prefix_cache_hits_total[10s])) / "
                                    "sum(rate(vllm:prefix_cache_queries_total[10s]))")["data"]["result"]
        self.assertTrue(hit_rate and float(hit_rate[0]["value"][1]) > 0.5, f"hit rate {hit_rate} (seed {SEED})")
        # Phase 2: prompts that share nothing drive the hit rate to zero; the alert must fire.
        def until_firing(deadline):
            while time.time() < deadline:
                if "firing" in self.alert_state(prom, "PrefixCacheHitRateLow"):
                    return True
                time.sleep(1)
            return False
        fired = self.run_traffic(server, lambda: [ids(560) for _ in range(400)], 90, until_firing)
        self.assertTrue(fired, f"PrefixCacheHitRateLow never fired (seed {SEED}):\n" +
                        json.dumps(get_json(prom["url"] + "/api/v1/rules"))[:3000])
        self.check_dashboard_queries(prom)

    def check_dashboard_queries(self, prom):
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        for p in dashboard["panels"]:
            for t in p.get("targets", []):
                expr = t["expr"].replace("$__rate_interval", "30s").replace('"$model_name"', '"dsv4-serve"')
                r = self.query(prom, expr)
                self.assertEqual(r["status"], "success", f"{p['title']}: {expr}: {r}")
                self.assertTrue(r["data"]["result"], f"{p['title']}: {expr} returned nothing")


if __name__ == "__main__":
    unittest.main()
