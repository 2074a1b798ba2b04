"""Anthropic's Messages API (POST /v1/messages) through the official anthropic client against a real
`dsv4 serve` on the embedded model (random weights), with an API key sent as x-api-key: a request is the chat
request it stands for (the same prompt tokens and, for the same seed, the same answer as
/v1/chat/completions, a tool conversation included), streams Anthropic's events in order, forces tool calls,
returns thinking blocks, stops on stop_sequences, counts tokens, and answers errors in Anthropic's envelope."""
import json
import unittest

import anthropic
import jsonschema
from openai import OpenAI

from dsv4_server import Server, user

KEY = "test-key"
server = None
client = None
chat = None
MODEL = "dsv4-serve"

WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "maxLength": 10},
                          "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"], "additionalProperties": False}
TOOL = {"name": "get_weather", "description": "Weather by city", "input_schema": WEATHER}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
                                              "parameters": WEATHER}}


def setUpModule():
    global server, client, chat
    server = Server("--api-key", KEY).__enter__()
    client = anthropic.Anthropic(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=120)
    chat = OpenAI(base_url=server.base_url + "/v1", api_key=KEY, max_retries=0, timeout=120)


def tearDownModule():
    code = server.stop()
    server.__exit__(None, None, None)
    assert code == 0, f"dsv4 serve exited with {code} after SIGTERM"


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


class SameAsChat(unittest.TestCase):
    def test_system_and_text(self):
        got = client.messages.create(model=MODEL, system="Be brief.", max_tokens=12, extra_body={"seed": 5},
                                     messages=[{"role": "user", "content": "Name a color."}])
        r = chat.chat.completions.create(model=MODEL, max_tokens=12, seed=5,
                                         messages=[{"role": "system", "content": "Be brief."}, *user("Name a color.")])
        self.assertEqual(text_of(got), r.choices[0].message.content)
        self.assertEqual(got.usage.input_tokens + got.usage.cache_read_input_tokens, r.usage.prompt_tokens)
        self.assertEqual(got.usage.output_tokens, r.usage.completion_tokens)
        self.assertEqual(got.stop_reason, "max_tokens")

    def test_tool_conversation(self):
        turns = [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                 {"role": "assistant", "content": [
                     {"type": "text", "text": "Let me look."},
                     {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                      "input": {"city": "Paris", "days": 1}}]},
                 {"role": "user", "content": [
                     {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21 C"},
                     {"type": "text", "text": "And tomorrow?"}]}]
        messages = [{"role": "user", "content": "Weather in Paris?"},
                    {"role": "assistant", "content": "Let me look.", "tool_calls": [
                        {"id": "toolu_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 1})}}]},
                    {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny, 21 C"},
                    {"role": "user", "content": "And tomorrow?"}]
        got = client.messages.create(model=MODEL, messages=turns, tools=[TOOL], max_tokens=10, extra_body={"seed": 9})
        r = chat.chat.completions.create(model=MODEL, messages=messages, tools=[CHAT_TOOL], max_tokens=10, seed=9)
        self.assertEqual(got.usage.input_tokens + got.usage.cache_read_input_tokens, r.usage.prompt_tokens)
        self.assertEqual(text_of(got), r.choices[0].message.content)
        count = client.messages.count_tokens(model=MODEL, messages=turns, tools=[TOOL])
        self.assertEqual(count.input_tokens, r.usage.prompt_tokens)


class Answers(unittest.TestCase):
    def test_stream(self):
        kw = dict(model=MODEL, max_tokens=12, messages=[{"role": "user", "content": "A story."}],
                  extra_body={"seed": 3})
        with client.messages.stream(**kw) as s:
            events = list(s)
            final = s.get_final_message()
        types = [e.type for e in events]
        self.assertEqual(types[0], "message_start")
        self.assertEqual(types[-2:], ["message_delta", "message_stop"])
        self.assertEqual(types.count("content_block_start"), 1)
        self.assertEqual(types.count("content_block_stop"), 1)
        self.assertEqual(final.stop_reason, "max_tokens")
        self.assertEqual(final.usage.output_tokens, 12)
        self.assertEqual(text_of(final), text_of(client.messages.create(**kw)))

    def test_thinking_block(self):
        r = client.messages.create(model=MODEL, max_tokens=8, thinking={"type": "enabled", "budget_tokens": 1024},
                                   messages=[{"role": "user", "content": "Think."}])
        self.assertEqual(r.content[0].type, "thinking")
        self.assertTrue(r.content[0].thinking)

    def test_thinking_budget(self):
        # Past budget_tokens of reasoning "</think>" is forced, so the answer starts; chat takes the same field.
        kw = dict(model=MODEL, max_tokens=12, messages=[{"role": "user", "content": "Think."}], extra_body={"seed": 8})
        r = client.messages.create(thinking={"type": "enabled", "budget_tokens": 3}, **kw)
        self.assertEqual([b.type for b in r.content], ["thinking", "text"])
        self.assertEqual(r.usage.output_tokens, 12)
        c = chat.chat.completions.create(model=MODEL, max_tokens=12, seed=8, messages=user("Think."),
                                         extra_body={"thinking": {"type": "enabled", "budget_tokens": 3}})
        self.assertEqual(c.choices[0].message.reasoning_content, r.content[0].thinking)
        self.assertEqual(c.choices[0].message.content, r.content[1].text)
        unlimited = client.messages.create(thinking={"type": "enabled", "budget_tokens": 1024}, **kw)
        self.assertEqual([b.type for b in unlimited.content], ["thinking"])  # a random model never ends it
        # With a forced tool call the grammar takes over once the reasoning ends.
        r = client.messages.create(model=MODEL, max_tokens=200, thinking={"type": "enabled", "budget_tokens": 3},
                                   tools=[TOOL], tool_choice={"type": "any"}, extra_body={"seed": 8},
                                   messages=[{"role": "user", "content": "Weather?"}])
        self.assertEqual([b.type for b in r.content], ["thinking", "tool_use"])
        jsonschema.validate(r.content[1].input, WEATHER)

    def test_forced_tool_use(self):
        for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
            r = client.messages.create(model=MODEL, max_tokens=200, tools=[TOOL], tool_choice=choice,
                                       messages=[{"role": "user", "content": "Weather?"}], extra_body={"seed": 4})
            uses = [b for b in r.content if b.type == "tool_use"]
            self.assertEqual(len(uses), 1, r.content)
            self.assertEqual(uses[0].name, "get_weather")
            jsonschema.validate(uses[0].input, WEATHER)
            self.assertEqual(r.stop_reason, "tool_use")

    def test_stop_sequence(self):
        kw = dict(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "Go."}], extra_body={"seed": 6})
        whole = text_of(client.messages.create(**kw))
        stop = whole.strip()[3:6]
        self.assertTrue(stop, whole)
        r = client.messages.create(stop_sequences=[stop], **kw)
        self.assertEqual(r.stop_reason, "stop_sequence")
        self.assertEqual(r.stop_sequence, stop)
        self.assertEqual(text_of(r), whole[:whole.index(stop)])


class Errors(unittest.TestCase):
    def test_errors_in_anthropics_envelope(self):
        with self.assertRaises(anthropic.BadRequestError) as cm:
            client.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}])
        self.assertEqual(cm.exception.body["type"], "error")
        self.assertEqual(cm.exception.body["error"]["type"], "invalid_request_error")
        self.assertEqual(cm.exception.body["error"]["param"], "messages[0].content[0].type")
        with self.assertRaises(anthropic.BadRequestError) as cm:
            client.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "x"}],
                                   tools=[{"type": "web_search_20250305", "name": "web_search"}])
        self.assertEqual(cm.exception.body["error"]["param"], "tools[0].type")
        with self.assertRaises(anthropic.AuthenticationError):
            anthropic.Anthropic(base_url=server.base_url, api_key="wrong", max_retries=0).messages.create(
                model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "x"}])


if __name__ == "__main__":
    unittest.main()
