"""A long prefill on the CPU engine (the embedded default model) stops within one chunk of its client leaving.

The server runs prefill chunks of 32 tokens, which the CPU computes faster than a server polling its
connections every 100-200 ms would notice the client leaving; the prompt (fresh random token ids) takes 200
of them. Once a few chunks are computed, the client closes its socket. The request must be aborted and its
KV blocks freed, and the engine may compute only the chunk that was running when the client left: the test
allows two chunks, because the counter it reads before closing (/metrics, published after each step) may
lag the engine by the chunk in flight. Both a streaming and a non-streaming request are checked."""
import json
import random
import socket
import time
import unittest

from dsv4_server import ServerTestCase

CHUNK = 32
PROMPT = 200 * CHUNK


class LongPrefillAbort(ServerTestCase):
    SERVER_ARGS = ("--max-num-batched-tokens", str(CHUNK), "--max-model-len", str(PROMPT + 64))

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.vocab = json.loads(cls.server.get("/v1/models")[1])["data"][0]["vocab_size"]

    def computed(self):
        return self.server.metric_sum("dsv4:computed_tokens_total")

    def aborted(self):
        return self.server.metric_sum("dsv4:requests_aborted_total")

    def wait(self, done, timeout, what):
        deadline = time.time() + timeout
        while not done():
            self.assertLess(time.time(), deadline, f"timed out waiting for {what}\n{self.server.log()[-3000:]}")
            time.sleep(0.01)

    def leave_during_prefill(self, stream):
        rng = random.Random()  # fresh ids each run: no prefix-cache hit can shorten the prefill
        prompt = [rng.randrange(1000, self.vocab) for _ in range(PROMPT)]
        body = json.dumps({"prompt": prompt, "max_tokens": 1, "stream": stream}).encode()
        base, aborted = self.computed(), self.aborted()
        sock = socket.create_connection(("127.0.0.1", self.server.port), timeout=30)
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        self.wait(lambda: self.computed() - base >= 3 * CHUNK, 120, "three chunks of prefill")
        before_close = self.computed() - base
        sock.close()
        self.wait(lambda: self.aborted() > aborted, 60, "the abort")
        after_abort = self.computed() - base
        self.assertLess(after_abort, PROMPT, "the prefill ran to its end")
        self.assertLessEqual(after_abort - before_close, 2 * CHUNK,
                             f"{after_abort - before_close} tokens were computed after the client left")
        self.assertTrue(self.server.wait_kv_free(10), "KV blocks were not all released")

    def test_non_streaming(self):
        self.leave_during_prefill(stream=False)

    def test_streaming(self):
        self.leave_during_prefill(stream=True)


if __name__ == "__main__":
    unittest.main()
