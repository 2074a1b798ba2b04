"""The Responses API (POST /v1/responses) through the official OpenAI client against a real `dsv4 serve` on the
embedded model (the V4 tokenizer's vocabulary, random weights): a request is the chat request it stands for
(the same prompt tokens and, for the same seed, the same answer as /v1/chat/completions, multi-turn tool
conversations included), streams its named events in order, forces tool calls and JSON schemas, returns
reasoning items in thinking mode, and refuses what a stateless server cannot do with a 400 naming the field."""
import json
import unittest

import jsonschema
import openai

from dsv4_server import ModuleServer, user

module = ModuleServer()
server = None
client = None
MODEL = "dsv4-serve"

WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "maxLength": 10}, "days": {"type": "integer", "minimum": 1,
                                                                             "maximum": 7}},
           "required": ["city", "days"], "additionalProperties": False}
TOOL = {"type": "function", "name": "get_weather", "description": "Weather by city", "parameters": WEATHER}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
                                              "parameters": WEATHER}}


def setUpModule():
    global server, client
    server, client = module.start(timeout=300)


def tearDownModule():
    module.stop()


def chat_text(messages, **kw):
    r = client.chat.completions.create(model=MODEL, messages=messages, **kw)
    return r.choices[0].message.content, r.usage


class SameAsChat(unittest.TestCase):
    """The translation is checked where it matters: the prompt the model sees and what it answers."""

    def test_instructions_and_input(self):
        got = client.responses.create(model=MODEL, instructions="Be brief.", input="Name a color.",
                                      max_output_tokens=12, extra_body={"seed": 5})
        text, usage = chat_text([{"role": "system", "content": "Be brief."}, *user("Name a color.")], max_tokens=12,
                                seed=5)
        self.assertEqual(got.output_text, text)
        self.assertEqual(got.usage.input_tokens, usage.prompt_tokens)
        self.assertEqual(got.usage.output_tokens, usage.completion_tokens)
        self.assertEqual(got.usage.total_tokens, usage.prompt_tokens + usage.completion_tokens)

    def test_tool_conversation_items(self):
        items = [{"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
                 {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                  "arguments": '{"city": "Paris", "days": 1}'},
                 {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C"},
                 {"role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
                 {"role": "user", "content": "And tomorrow?"}]
        messages = [{"role": "user", "content": "Weather in Paris?"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 1}'}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"},
                    {"role": "assistant", "content": "It is sunny."},
                    {"role": "user", "content": "And tomorrow?"}]
        got = client.responses.create(model=MODEL, input=items, tools=[TOOL], max_output_tokens=10,
                                      extra_body={"seed": 9})
        text, usage = chat_text(messages, tools=[CHAT_TOOL], max_tokens=10, seed=9)
        self.assertEqual(got.usage.input_tokens, usage.prompt_tokens)
        self.assertEqual(got.output_text, text)


    def test_logprobs(self):
        got = client.responses.create(model=MODEL, input="Count.", max_output_tokens=5, top_logprobs=2,
                                      include=["message.output_text.logprobs"], extra_body={"seed": 2})
        r = client.chat.completions.create(model=MODEL, messages=user("Count."), max_tokens=5, seed=2, logprobs=True,
                                           top_logprobs=2)
        lps = got.output[0].content[0].logprobs
        want = r.choices[0].logprobs.content
        self.assertEqual(len(lps), 5)
        self.assertEqual([(p.token, p.logprob) for p in lps], [(p.token, p.logprob) for p in want])
        self.assertEqual([[t.token for t in p.top_logprobs] for p in lps],
                         [[t.token for t in p.top_logprobs] for p in want])
        events = list(client.responses.create(model=MODEL, input="Count.", max_output_tokens=5, top_logprobs=2,
                                              include=["message.output_text.logprobs"], extra_body={"seed": 2},
                                              stream=True))
        streamed = [p.token for e in events if e.type == "response.output_text.delta" for p in e.logprobs]
        self.assertEqual(streamed, [p.token for p in lps])


class Answers(unittest.TestCase):
    def test_object(self):
        r = client.responses.create(model=MODEL, input="Hello", max_output_tokens=6, metadata={"k": "v"})
        self.assertEqual(r.object, "response")
        self.assertTrue(r.id.startswith("resp_"))
        self.assertEqual(r.status, "incomplete")  # a random model runs to the token limit
        self.assertEqual(r.incomplete_details.reason, "max_output_tokens")
        self.assertEqual(r.usage.output_tokens, 6)
        self.assertEqual(r.metadata, {"k": "v"})
        self.assertEqual([o.type for o in r.output], ["message"])
        self.assertEqual(r.output[0].role, "assistant")

    def test_stream_events(self):
        kw = dict(model=MODEL, input="Tell me a story.", max_output_tokens=12, extra_body={"seed": 3})
        events = list(client.responses.create(stream=True, **kw))
        types = [e.type for e in events]
        self.assertEqual(types[:2], ["response.created", "response.in_progress"])
        self.assertEqual(types[-1], "response.incomplete")
        self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
        for t in ("response.output_item.added", "response.content_part.added", "response.output_text.done",
                  "response.content_part.done", "response.output_item.done"):
            self.assertEqual(types.count(t), 1, t)
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        final = events[-1].response
        self.assertEqual(final.output_text, deltas)
        self.assertEqual(final.output_text, client.responses.create(**kw).output_text)
        self.assertEqual(final.usage.output_tokens, 12)

    def test_reasoning_item(self):
        r = client.responses.create(model=MODEL, input="Think.", reasoning={"effort": "high"}, max_output_tokens=8,
                                    extra_body={"seed": 5})
        self.assertEqual(r.output[0].type, "reasoning")
        self.assertEqual(r.output[0].content[0].type, "reasoning_text")
        # Every generated token counts while thinking: here the token limit ends it there.
        self.assertEqual([o.type for o in r.output], ["reasoning"])
        self.assertEqual(r.usage.output_tokens_details.reasoning_tokens, r.usage.output_tokens)
        # Chat mode: no reasoning tokens.
        r = client.responses.create(model=MODEL, input="Hi.", max_output_tokens=4, extra_body={"seed": 5})
        self.assertEqual(r.usage.output_tokens_details.reasoning_tokens, 0)

    def test_forced_tool_call(self):
        for choice in ("required", {"type": "function", "name": "get_weather"}):
            r = client.responses.create(model=MODEL, input="Weather?", tools=[TOOL], tool_choice=choice,
                                        max_output_tokens=200, extra_body={"seed": 4})
            calls = [o for o in r.output if o.type == "function_call"]
            self.assertEqual(len(calls), 1, r.output)
            self.assertEqual(calls[0].name, "get_weather")
            self.assertTrue(calls[0].call_id)
            jsonschema.validate(json.loads(calls[0].arguments), WEATHER)

    def test_json_schema(self):
        schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
                  "required": ["n"], "additionalProperties": False}
        r = client.responses.create(model=MODEL, input="JSON please.", max_output_tokens=100,
                                    text={"format": {"type": "json_schema", "name": "n", "schema": schema,
                                                     "strict": True}})
        self.assertEqual(r.status, "completed")
        jsonschema.validate(json.loads(r.output_text), schema)


class Refusals(unittest.TestCase):
    def assert_refused(self, param, **kw):
        with self.assertRaises(openai.BadRequestError) as cm:
            client.responses.create(model=MODEL, max_output_tokens=4, **kw)
        self.assertEqual(cm.exception.body.get("param"), param, cm.exception.body)

    def test_refusals_name_the_field(self):
        self.assert_refused("previous_response_id", input="x", previous_response_id="resp_1")
        self.assert_refused("input[0].content[0].type",
                            input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}])
        self.assert_refused("tools[0].type", input="x", tools=[{"type": "web_search"}])
        self.assert_refused("input[0].type", input=[{"type": "item_reference", "id": "msg_1"}])
        self.assert_refused("input", input=7)
        self.assert_refused("max_output_tokens", input="x", extra_body={"max_output_tokens": 0})
        self.assert_refused("messages", input="x", extra_body={"messages": []})


if __name__ == "__main__":
    unittest.main()
