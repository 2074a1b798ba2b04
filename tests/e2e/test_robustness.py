"""Robustness of a real `dsv4 serve`: the error table (status and OpenAI error type per bad request), bearer
auth, the bounded waiting queue, SSE keep-alives during a long prefill, client disconnects (streaming and
not; completions, Responses and Messages streams) aborting their requests and freeing every KV block, engine
failure (500s, /health 503, exit code 1, a stream's error event) and graceful SIGTERM (in-flight requests
finish, exit code 0)."""
import json
import socket
import threading
import time
import unittest

import openai
from openai import OpenAI

from dsv4_server import Server, ServerTestCase

MODEL = "dsv4-serve"


def raw_http(port, method, path, body=b"", headers=()):
    """A raw request on its own socket (for bodies urllib would not send as is)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers) + "Connection: close\r\n\r\n"
    s.sendall(head.encode() + body)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1].decode(errors="replace")


def open_stream(port, body, path="/v1/completions"):
    """Sends a streaming request and returns the socket (the caller reads and closes it)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    data = json.dumps(body).encode()
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return s


def read_until(s, marker, limit=1 << 20):
    data = b""
    while marker not in data and len(data) < limit:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


class ErrorTable(ServerTestCase):
    SERVER_ARGS = ("--max-request-bytes", "65536", "--max-model-len", "4096")

    def test_bad_requests(self):
        chat = "/v1/chat/completions"
        comp = "/v1/completions"
        msgs = [{"role": "user", "content": "x"}]
        cases = [
            ("malformed JSON", chat, b'{"messages": [', 400, "invalid_request_error"),
            ("empty body", comp, b"", 400, "invalid_request_error"),
            ("body not an object", comp, b"[1, 2]", 400, "invalid_request_error"),
            ("missing messages", chat, {"model": MODEL}, 400, "invalid_request_error"),
            ("messages not a list", chat, {"messages": "hi"}, 400, "invalid_request_error"),
            ("unknown role", chat, {"messages": [{"role": "bot", "content": "x"}]}, 400, "invalid_request_error"),
            ("temperature a string", chat, {"messages": msgs, "temperature": "hot"}, 400, "invalid_request_error"),
            ("max_tokens zero", chat, {"messages": msgs, "max_tokens": 0}, 400, "invalid_request_error"),
            ("n too large", comp, {"prompt": "x", "n": 1000}, 400, "invalid_request_error"),
            ("top_p out of range", comp, {"prompt": "x", "top_p": 1.5}, 400, "invalid_request_error"),
            ("logit_bias bad key", comp, {"prompt": "x", "logit_bias": {"a": 1}}, 400, "invalid_request_error"),
            ("token id beyond vocab", comp, {"prompt": [10 ** 9]}, 400, "invalid_request_error"),
            ("unknown model", comp, {"model": "nope", "prompt": "x"}, 404, "not_found_error"),
            ("over-long prompt", comp, {"prompt": [7] * 5000}, 400, "invalid_request_error"),
            ("prompt + max_tokens too long", comp, {"prompt": "x", "max_tokens": 5000}, 400,
             "invalid_request_error"),
            ("echo in chat", chat, {"messages": msgs, "echo": True}, 400, "invalid_request_error"),
            ("echo with logprobs, streamed", comp, {"prompt": "x", "echo": True, "logprobs": 1, "stream": True}, 400,
             "invalid_request_error"),
            ("prompt_logprobs streamed", comp, {"prompt": "x", "prompt_logprobs": 1, "stream": True}, 400,
             "invalid_request_error"),
            ("response_format", chat, {"messages": msgs, "response_format": {"type": "json_schema"}}, 400,
             "invalid_request_error"),
            ("tool_choice required", chat, {"messages": msgs, "tool_choice": "required"}, 400,
             "invalid_request_error"),
            ("payload too large", comp, {"prompt": "a" * 70000}, 413, "invalid_request_error"),
            ("no such endpoint", "/v1/embeddings", {"input": "x"}, 404, "not_found_error"),
        ]
        for name, path, body, status, etype in cases:
            with self.subTest(name):
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                got, text = raw_http(self.server.port, "POST", path, raw)
                self.assertEqual(got, status, f"{name}: {text}")
                err = json.loads(text)["error"]
                self.assertEqual(err["type"], etype, name)
                self.assertTrue(err["message"], name)
        _, text = raw_http(self.server.port, "POST", comp, json.dumps({"prompt": [7] * 5000}).encode())
        self.assertIn("maximum context length is 4096 tokens", json.loads(text)["error"]["message"])
        self.assertTrue(self.server.wait_kv_free())


class Auth(unittest.TestCase):
    def test_api_key(self):
        with Server("--api-key", "sekret") as s:
            with self.assertRaises(openai.AuthenticationError):
                OpenAI(base_url=s.base_url + "/v1", api_key="wrong", max_retries=0).models.list()
            ok = OpenAI(base_url=s.base_url + "/v1", api_key="sekret", max_retries=0)
            self.assertEqual(ok.models.list().data[0].id, MODEL)
            self.assertEqual(s.get("/health")[0], 200)  # probes need no key
            self.assertEqual(s.stop(), 0)


class Queue(unittest.TestCase):
    def test_full_queue_answers_503(self):
        with Server("--max-num-seqs", "1", "--max-waiting-requests", "0") as s:
            sock = open_stream(s.port, {"prompt": "x", "max_tokens": 400, "ignore_eos": True, "stream": True})
            read_until(sock, b"data:")
            status, text = s.request("POST", "/v1/completions", {"prompt": "y", "max_tokens": 1})
            self.assertEqual(status, 503)
            self.assertEqual(json.loads(text)["error"]["code"], "queue_full")
            sock.close()
            self.assertTrue(s.wait_kv_free())
            # The aborted stream's admission is released when its handler thread notices the hang-up,
            # which may come just after the engine freed its KV: a retry within a few seconds succeeds.
            deadline = time.time() + 10
            while True:
                status = s.request("POST", "/v1/completions", {"prompt": "y", "max_tokens": 1})[0]
                if status == 200 or time.time() > deadline:
                    break
                time.sleep(0.1)
            self.assertEqual(status, 200)


class Disconnects(ServerTestCase):
    SERVER_ARGS = ("--sse-ping-interval", "0.05", "--max-num-batched-tokens", "64")

    def aborted(self):
        return self.server.metric_sum("dsv4:requests_aborted_total")

    def wait_aborted(self, want, timeout=10):
        # The abort is counted when the handler sees the hang-up, which can trail the freed KV.
        deadline = time.time() + timeout
        while self.aborted() < want and time.time() < deadline:
            time.sleep(0.05)
        return self.aborted()

    def test_streaming_disconnect_aborts_and_frees_kv(self):
        before = self.aborted()
        sock = open_stream(self.server.port, {"prompt": "x", "max_tokens": 3000, "ignore_eos": True, "stream": True})
        data = read_until(sock, b'"text"')
        self.assertIn(b"text/event-stream", data)
        sock.close()
        self.assertTrue(self.server.wait_kv_free(10), "KV blocks were not all released")
        self.assertEqual(self.wait_aborted(before + 1), before + 1)

    def test_responses_and_messages_streams_abort_on_disconnect(self):
        for path, body, marker in (
                ("/v1/responses", {"input": "x", "max_output_tokens": 3000, "ignore_eos": True, "stream": True},
                 b"response.output_text.delta"),
                ("/v1/messages", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 3000,
                                  "ignore_eos": True, "stream": True}, b"content_block_delta")):
            with self.subTest(path=path):
                before = self.aborted()
                sock = open_stream(self.server.port, body, path)
                read_until(sock, marker)
                sock.close()
                self.assertTrue(self.server.wait_kv_free(10), "KV blocks were not all released")
                self.assertEqual(self.wait_aborted(before + 1), before + 1)

    def test_non_streaming_disconnect_aborts_too(self):
        before = self.aborted()
        sock = socket.create_connection(("127.0.0.1", self.server.port))
        body = json.dumps({"prompt": "x", "max_tokens": 3000, "ignore_eos": True}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        time.sleep(0.5)
        sock.close()
        self.assertTrue(self.server.wait_kv_free(10), "KV blocks were not all released")
        self.assertEqual(self.wait_aborted(before + 1), before + 1)

    def test_keep_alive_pings_during_a_long_prefill(self):
        sock = open_stream(self.server.port, {"prompt": list(range(1000, 1600)), "max_tokens": 1, "stream": True})
        data = read_until(sock, b"data: [DONE]")
        sock.close()
        head = data.split(b'"text"')[0]
        self.assertIn(b": ping", head, "no keep-alive comment before the first token")


class Failure(unittest.TestCase):
    def test_engine_failure_gives_5xx_unhealthy_and_exit_1(self):
        with Server("--fail-after-steps", "4") as s:
            client = OpenAI(base_url=s.base_url + "/v1", api_key="x", max_retries=0)
            with self.assertRaises(openai.InternalServerError) as e:
                client.completions.create(model=MODEL, prompt="x", max_tokens=50, extra_body={"ignore_eos": True})
            self.assertIn("injected failure", e.exception.message)
            code = s.proc.wait(timeout=30)
            self.assertEqual(code, 1, s.log())
            self.assertIn("the engine failed", s.log())

    def test_stream_gets_an_error_event(self):
        with Server("--fail-after-steps", "4") as s:
            sock = open_stream(s.port, {"prompt": "x", "max_tokens": 50, "ignore_eos": True, "stream": True})
            data = read_until(sock, b"data: [DONE]").decode(errors="replace")
            sock.close()
            self.assertIn('"error"', data)
            self.assertIn('"server_error"', data)
            self.assertEqual(s.proc.wait(timeout=30), 1)


    def test_messages_stream_gets_anthropics_error_event(self):
        with Server("--fail-after-steps", "4") as s:
            body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 50, "ignore_eos": True,
                    "stream": True}
            sock = open_stream(s.port, body, "/v1/messages")
            data = read_until(sock, b"server_error").decode(errors="replace")
            sock.close()
            self.assertIn('event: error\ndata: {"type":"error","error":{', data)
            self.assertNotIn("message_stop", data)
            self.assertEqual(s.proc.wait(timeout=30), 1)


class GracefulShutdown(unittest.TestCase):
    def test_sigterm_finishes_in_flight_and_exits_0(self):
        with Server("--shutdown-timeout", "30") as s:
            client = OpenAI(base_url=s.base_url + "/v1", api_key="x", max_retries=0)
            result = {}
            t = threading.Thread(target=lambda: result.update(r=client.completions.create(
                model=MODEL, prompt="x", max_tokens=40, extra_body={"ignore_eos": True})))
            t.start()
            time.sleep(0.5)
            code = s.stop()
            t.join()
            self.assertEqual(code, 0, s.log())
            self.assertEqual(result["r"].choices[0].finish_reason, "length")
            self.assertEqual(result["r"].usage.completion_tokens, 40)
            self.assertIn("SIGTERM received", s.log())


if __name__ == "__main__":
    unittest.main()
