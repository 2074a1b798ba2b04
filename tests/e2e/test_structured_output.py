"""Structured output through the official OpenAI client against a real `dsv4 serve` on the embedded model
(the V4 tokenizer's vocabulary, random weights: the model itself knows no JSON, so every valid answer is
the constraint's doing): json_schema answers parse and validate (jsonschema) for 50 seeds per schema,
forced tool calls parse into calls whose arguments validate, guided_choice / regex / grammar, json_object,
streaming, the completions endpoint, and 400s that name what was refused."""
import concurrent.futures
import json
import re
import unittest

import jsonschema
import openai

from dsv4_server import ModuleServer, user

module = ModuleServer()
server = None
client = None
MODEL = "dsv4-serve"
SEEDS = 50

# Bounded schemas: a random model ends them well within max_tokens.
SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "email": {"type": "string", "format": "email"},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    "nested": {
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number", "minimum": -10, "maximum": 10},
                                                              "y": {"type": "integer"}},
                            "required": ["x", "y"]}},
        "type": "object",
        "properties": {
            "kind": {"anyOf": [{"const": "line"}, {"type": "null"}]},
            "points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "minItems": 1, "maxItems": 3},
            "when": {"type": "string", "format": "date"},
            "ok": {"type": "boolean"},
        },
        "required": ["kind", "points", "ok"],
    },
    "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2,4}$"},
}

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 10},
                       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                       "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
]


def setUpModule():
    global server, client
    server, client = module.start(timeout=600)


def tearDownModule():
    module.stop()


def for_seeds(fn, seeds=SEEDS):
    """fn(seed) for every seed at once (the engine batches them)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=seeds) as pool:
        return list(pool.map(fn, range(seeds)))


class JsonSchema(unittest.TestCase):
    def test_answers_validate_for_every_seed(self):
        for name, schema in SCHEMAS.items():
            fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}

            def ask(seed):
                return client.chat.completions.create(model=MODEL, messages=user("Answer in JSON."), seed=seed,
                                                      max_tokens=400, response_format=fmt).choices[0]

            for seed, choice in enumerate(for_seeds(ask)):
                with self.subTest(schema=name, seed=seed):
                    self.assertEqual(choice.finish_reason, "stop", choice.message.content)
                    jsonschema.validate(json.loads(choice.message.content), schema,
                                        format_checker=jsonschema.FormatChecker())

    def test_guided_json_and_structured_outputs_spellings(self):
        schema = SCHEMAS["person"]
        for extra in ({"guided_json": schema}, {"structured_outputs": {"json": schema}}):
            r = client.chat.completions.create(model=MODEL, messages=user("x"), seed=1, max_tokens=400,
                                               extra_body=extra)
            jsonschema.validate(json.loads(r.choices[0].message.content), schema)

    def test_stream_equals_non_stream(self):
        fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMAS["nested"]}}
        kwargs = dict(model=MODEL, messages=user("x"), seed=7, max_tokens=400, response_format=fmt)
        whole = client.chat.completions.create(**kwargs).choices[0].message.content
        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**kwargs, stream=True)
                       if c.choices)
        self.assertEqual(text, whole)
        jsonschema.validate(json.loads(text), SCHEMAS["nested"])

    def test_json_object(self):
        for choice in for_seeds(lambda seed: client.chat.completions.create(
                model=MODEL, messages=user("x"), seed=seed, max_tokens=60,
                response_format={"type": "json_object"}).choices[0], seeds=10):
            text = choice.message.content
            self.assertTrue(text.startswith("{"), text)
            if choice.finish_reason == "stop":
                self.assertIsInstance(json.loads(text), dict)


class ForcedToolCalls(unittest.TestCase):
    def check_calls(self, choice, names, most):
        self.assertEqual(choice.finish_reason, "tool_calls", choice.message)
        calls = choice.message.tool_calls
        self.assertTrue(1 <= len(calls) <= most, calls)
        for call in calls:
            self.assertIn(call.function.name, names)
            schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == call.function.name)
            jsonschema.validate(json.loads(call.function.arguments), schema)
        self.assertFalse(choice.message.content)

    def test_required(self):
        def ask(seed):
            return client.chat.completions.create(model=MODEL, messages=user("Weather?"), seed=seed, max_tokens=500,
                                                  tools=TOOLS, tool_choice="required").choices[0]

        for seed, choice in enumerate(for_seeds(ask)):
            with self.subTest(seed=seed):
                self.check_calls(choice, {"get_weather", "add"}, 100)

    def test_named_function(self):
        def ask(seed):
            return client.chat.completions.create(
                model=MODEL, messages=user("Add."), seed=seed, max_tokens=300, tools=TOOLS,
                tool_choice={"type": "function", "function": {"name": "add"}}).choices[0]

        for seed, choice in enumerate(for_seeds(ask)):
            with self.subTest(seed=seed):
                self.check_calls(choice, {"add"}, 1)

    def test_streamed_call(self):
        chunks = list(client.chat.completions.create(model=MODEL, messages=user("x"), seed=3, max_tokens=300,
                                                     tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                                                     stream=True))
        calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
        self.assertEqual(len(calls), 1)
        self.assertEqual([c.choices[0].finish_reason for c in chunks if c.choices][-1], "tool_calls")


class GuidedOthers(unittest.TestCase):
    def test_choice_regex_grammar(self):
        for seed in range(5):
            r = client.chat.completions.create(model=MODEL, messages=user("x"), seed=seed, max_tokens=20,
                                               extra_body={"guided_choice": ["yes", "no", "maybe later"]})
            self.assertIn(r.choices[0].message.content, ["yes", "no", "maybe later"])
            r = client.chat.completions.create(model=MODEL, messages=user("x"), seed=seed, max_tokens=40,
                                               extra_body={"guided_regex": r"\d{3}-[a-z]{2,5}"})
            self.assertRegex(r.choices[0].message.content, r"^\d{3}-[a-z]{2,5}$")
            r = client.chat.completions.create(model=MODEL, messages=user("x"), seed=seed, max_tokens=40,
                                               extra_body={"guided_grammar": 'root ::= "SELECT " col " FROM t"\n'
                                                                             'col ::= "a" | "b" | "c"'})
            self.assertRegex(r.choices[0].message.content, r"^SELECT [abc] FROM t$")

    def test_completions_endpoint(self):
        r = client.completions.create(model=MODEL, prompt="The answer is", max_tokens=10, seed=2, n=3,
                                      extra_body={"guided_choice": ["red", "green"]})
        self.assertTrue(all(c.text in ("red", "green") for c in r.choices), [c.text for c in r.choices])

    def test_refusals_name_what_is_refused(self):
        with self.assertRaises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL, messages=user("x"), max_tokens=5, response_format={
                "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "format": "ipv6"}}})
        self.assertIn('format \\"ipv6\\"', json.dumps(e.exception.body))
        self.assertEqual(e.exception.body["param"], "response_format.json_schema")
        with self.assertRaises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL, messages=user("x"), max_tokens=5,
                                           extra_body={"guided_regex": "(a)\\1"})
        self.assertIn("backreference", e.exception.message)
        with self.assertRaises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL, messages=user("x"), max_tokens=5, tools=TOOLS,
                                           tool_choice={"type": "function", "function": {"name": "nope"}})
        self.assertIn("no tool is named", e.exception.message)


if __name__ == "__main__":
    unittest.main()
