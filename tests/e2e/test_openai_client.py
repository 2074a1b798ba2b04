"""The official OpenAI Python client against a real `dsv4 serve` on the embedded `serve` preset (the real V4
tokenizer's vocabulary, random weights): chat and completions, streaming and not, usage, n, stop strings,
seeds, logprobs, thinking, tools, and the errors the client raises."""
import json
import unittest

import openai

from dsv4_server import ModuleServer, user

module = ModuleServer()
server = None
client = None
MODEL = "dsv4-serve"


def setUpModule():
    global server, client
    server, client = module.start("--default-max-tokens", "6", timeout=120)


def tearDownModule():
    module.stop()


class Models(unittest.TestCase):
    def test_list(self):
        models = client.models.list()
        self.assertEqual([m.id for m in models.data], [MODEL])


class Chat(unittest.TestCase):
    def test_non_stream(self):
        r = client.chat.completions.create(model=MODEL, messages=user("Hello!"), max_tokens=8, temperature=0)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIsInstance(r.choices[0].message.content, str)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 8)
        self.assertGreater(r.usage.prompt_tokens, 3)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 8)

    def test_stream_equals_non_stream_when_greedy(self):
        kwargs = dict(model=MODEL, messages=user("Count to ten."), max_tokens=12, temperature=0)
        whole = client.chat.completions.create(**kwargs).choices[0].message.content
        chunks = list(client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, whole)
        self.assertEqual([c.choices[0].finish_reason for c in chunks if c.choices][-1], "length")
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 12)

    def test_same_seed_same_text(self):
        kwargs = dict(model=MODEL, messages=user("Tell me a story."), max_tokens=10, temperature=1.0, seed=1234)
        a = client.chat.completions.create(**kwargs).choices[0].message.content
        b = client.chat.completions.create(**kwargs).choices[0].message.content
        self.assertEqual(a, b)

    def test_n_choices(self):
        r = client.chat.completions.create(model=MODEL, messages=user("Hi"), max_tokens=4, n=3, seed=7)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1, 2])
        self.assertEqual(r.usage.completion_tokens, 12)

    def test_logprobs(self):
        r = client.chat.completions.create(model=MODEL, messages=user("Hi"), max_tokens=3, logprobs=True,
                                           top_logprobs=2, temperature=0)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), 3)
        self.assertEqual(len(content[0].top_logprobs), 2)
        self.assertLessEqual(content[0].logprob, 0.0)
        # Greedy: the chosen token is the most likely one.
        self.assertAlmostEqual(content[0].logprob, content[0].top_logprobs[0].logprob, places=4)

    def test_thinking_returns_reasoning_under_both_names(self):
        r = client.chat.completions.create(model=MODEL, messages=user("Why?"), max_tokens=6, temperature=0,
                                           extra_body={"chat_template_kwargs": {"thinking": True}})
        m = r.choices[0].message
        # Random weights never close </think>: everything generated is reasoning.
        self.assertTrue(m.reasoning_content)
        self.assertEqual(m.reasoning, m.reasoning_content)
        plain = client.chat.completions.create(model=MODEL, messages=user("Why?"), max_tokens=6, temperature=0)
        self.assertIsNone(getattr(plain.choices[0].message, "reasoning_content", None))

    def test_tools_are_accepted(self):
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                                   "parameters": {"type": "object",
                                                                  "properties": {"city": {"type": "string"}}}}}]
        with_tools = client.chat.completions.create(model=MODEL, messages=user("Weather in Paris?"), tools=tools,
                                                    tool_choice="auto", max_tokens=4)
        without = client.chat.completions.create(model=MODEL, messages=user("Weather in Paris?"), max_tokens=4)
        # The tool schemas went into the prompt (on a system message, as the V4 encoder expects).
        self.assertGreater(with_tools.usage.prompt_tokens, without.usage.prompt_tokens + 50)


class Completions(unittest.TestCase):
    def test_non_stream_and_stream(self):
        r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=10, temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.usage.completion_tokens, 10)
        chunks = list(client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=10,
                                                temperature=0, stream=True, stream_options={"include_usage": True}))
        self.assertEqual("".join(c.choices[0].text for c in chunks if c.choices), r.choices[0].text)
        self.assertEqual(chunks[-1].usage.prompt_tokens, r.usage.prompt_tokens)

    def test_token_id_prompt_and_no_bos(self):
        ids = [1000, 2000, 3000]
        r = client.completions.create(model=MODEL, prompt=ids, max_tokens=2)
        self.assertEqual(r.usage.prompt_tokens, 3)  # nothing added in front

    def test_stop_string(self):
        r = client.completions.create(model=MODEL, prompt="a b c", max_tokens=20, temperature=0)
        text = r.choices[0].text
        stop = text[len(text) // 2:][:3].strip() or text[:2]
        if not stop:
            self.skipTest("empty generation")
        s = client.completions.create(model=MODEL, prompt="a b c", max_tokens=20, temperature=0, stop=[stop])
        self.assertEqual(s.choices[0].finish_reason, "stop")
        self.assertEqual(s.choices[0].text, text[:text.index(stop)])

    def test_logprobs(self):
        r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=3, logprobs=2)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 3)
        self.assertEqual(len(lp.token_logprobs), 3)
        self.assertGreaterEqual(len(lp.top_logprobs[0]), 2)

    def test_echo_with_logprobs_as_lm_eval_reads_loglikelihoods(self):
        prompt = "The capital of France is Paris"
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, logprobs=1, echo=True, temperature=0)
        c = r.choices[0]
        self.assertTrue(c.text.startswith(prompt))
        n = r.usage.prompt_tokens
        lp = c.logprobs
        self.assertEqual(len(lp.tokens), n + 1)  # the prompt's tokens, then the generated one
        self.assertEqual("".join(lp.tokens[:n]), prompt)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        self.assertTrue(all(x <= 0 for x in lp.token_logprobs[1:]))
        self.assertEqual(lp.text_offset[:2], [0, len(lp.tokens[0])])
        # The same numbers as vLLM's prompt_logprobs gives them; each position's most likely token is what a
        # request of the prefix before it ranks first.
        p = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0,
                                      extra_body={"prompt_logprobs": 2})
        scored = p.choices[0].model_extra["prompt_logprobs"]
        self.assertEqual(len(scored), n)
        self.assertIsNone(scored[0])
        ids = json.loads(server.request("POST", "/tokenize", {"model": MODEL, "prompt": prompt})[1])["tokens"]
        for k in (1, n - 1):
            mine = scored[k][str(ids[k])]
            self.assertAlmostEqual(mine["logprob"], lp.token_logprobs[k], places=5)
            first = next(e for e in scored[k].values() if e["rank"] == 1)
            b = client.completions.create(model=MODEL, prompt=ids[:k], max_tokens=1, temperature=0, logprobs=2)
            top = b.choices[0].logprobs.top_logprobs[0]
            best = max(top, key=top.get)
            self.assertEqual(first["decoded_token"], best)
            self.assertAlmostEqual(first["logprob"], top[best], places=5)

    def test_max_tokens_defaults_to_default_max_tokens(self):
        r = client.completions.create(model=MODEL, prompt="x", extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 6)  # the server runs with --default-max-tokens 6


class ClientErrors(unittest.TestCase):
    def test_unknown_model(self):
        with self.assertRaises(openai.NotFoundError) as e:
            client.chat.completions.create(model="gpt-5", messages=user("x"), max_tokens=1)
        self.assertEqual(e.exception.body["type"], "not_found_error")

    def test_over_long_prompt(self):
        with self.assertRaises(openai.BadRequestError) as e:
            client.completions.create(model=MODEL, prompt=[5] * 10, max_tokens=10 ** 7)
        self.assertIn("maximum context length", e.exception.message)
        self.assertEqual(e.exception.code, "context_length_exceeded")

    def test_wrong_type(self):
        with self.assertRaises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL, messages=user("x"), temperature="hot")
        self.assertEqual(e.exception.body["param"], "temperature")

    def test_response_format_structural_tag_refused(self):
        with self.assertRaises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL, messages=user("x"), max_tokens=1,
                                           response_format={"type": "structural_tag"})
        self.assertIn("not supported", e.exception.message)


if __name__ == "__main__":
    unittest.main()
