"""Starts and stops a real `dsv4 serve` for the end-to-end tests (stdlib only).

The binary comes from DSV4_BIN (tests/cli/serve_*.sh set it). The server listens on a free port
(--port 0; the port is read from its log) with a small KV cache so that it starts fast on CI.
DSV4_E2E_SERVE_ARGS adds flags to every server (bench/run-gpu.sh passes `--backend cuda`).
"""
import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

BIN = os.environ.get("DSV4_BIN", "build/tools/dsv4")
LISTEN_RE = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


class Server:
    def __init__(self, *args, env=None, kv_cache_memory="256MiB", timeout=300):
        self.log_file = tempfile.NamedTemporaryFile(prefix="dsv4-serve-", suffix=".log", delete=False)
        cmd = [BIN, "serve", "--port", "0", "--kv-cache-memory", kv_cache_memory, "--stats-interval", "2",
               *shlex.split(os.environ.get("DSV4_E2E_SERVE_ARGS", "")), *args]
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(cmd, stdout=self.log_file, stderr=subprocess.STDOUT, env=full_env)
        try:
            self.port = self._wait_for_port(timeout)
            self.base_url = f"http://127.0.0.1:{self.port}"
            self._wait_ready(timeout)
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def log(self):
        with open(self.log_file.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def _wait_for_port(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = LISTEN_RE.search(self.log())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"dsv4 serve exited with {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.05)
        raise RuntimeError(f"dsv4 serve did not listen within {timeout} s:\n{self.log()}")

    def _wait_ready(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, _ = self.get("/health")
            if status == 200:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"dsv4 serve exited with {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.1)
        raise RuntimeError(f"dsv4 serve was not ready within {timeout} s:\n{self.log()}")

    def request(self, method, path, body=None, headers=None, timeout=60):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers or {})
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except (urllib.error.URLError, ConnectionError):
            return 0, ""

    def get(self, path):
        return self.request("GET", path)

    def metrics(self):
        """The /metrics samples as {name{labels}: value}."""
        _, text = self.get("/metrics")
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                out[key] = float(value)
        return out

    def metric_sum(self, name):
        return sum(v for k, v in self.metrics().items() if k.split("{")[0] == name)

    def wait_kv_free(self, timeout=10):
        """True once no request runs or waits and no KV page is held."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = self.metrics()
            used = sum(v for k, v in m.items() if k.startswith("dsv4:kv_pool_used_pages"))
            running = sum(v for k, v in m.items() if k.startswith("vllm:num_requests_running"))
            waiting = sum(v for k, v in m.items() if k.startswith("vllm:num_requests_waiting"))
            if used == 0 and running == 0 and waiting == 0:
                return True
            time.sleep(0.05)
        return False

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.stop()
        self.log_file.close()
        os.unlink(self.log_file.name)


class ServerTestCase(unittest.TestCase):
    """Test classes whose tests share one server, started with SERVER_ARGS (its flags beyond Server's)."""

    SERVER_ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.server = Server(*cls.SERVER_ARGS)

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)


class ModuleServer:
    """One `dsv4 serve` and an official OpenAI client on it for a whole test module: start() in
    setUpModule, stop() in tearDownModule (which checks the server exits 0 on SIGTERM)."""

    def __init__(self):
        self.server = None
        self.client = None

    def start(self, *args, timeout=120):
        from openai import OpenAI  # only the client tests need the package

        self.server = Server(*args).__enter__()
        self.client = OpenAI(base_url=self.server.base_url + "/v1", api_key="unused", max_retries=0, timeout=timeout)
        return self.server, self.client

    def stop(self):
        code = self.server.stop()
        self.server.__exit__(None, None, None)
        assert code == 0, f"dsv4 serve exited with {code} after SIGTERM"


def user(text):
    return [{"role": "user", "content": text}]
