#include "server/unsupported_fields.h"

#include <span>

#include "server/api_error.h"

namespace dsv4::server {
namespace {

// What value of a refused field asks for the feature (any other is its harmless default).
enum class Asks : uint8_t {
  kAnyValue,  // anything but null
  kTrue,      // true (false is the default)
  kNonEmpty,  // a non-empty string, array or object
};

struct Refusal {
  const char* field;
  Asks asks;
  const char* what;  // names the feature in "... is not supported"
};

// Structured output (response_format, guided_*, structured_outputs) is structured_output_request.h's.
constexpr Refusal kBoth[] = {
    {"use_beam_search", Asks::kTrue, "Beam search"},
    {"logprob_token_ids", Asks::kAnyValue, "'logprob_token_ids'"},
    {"watermarking", Asks::kTrue, "'watermarking'"},
    {"repetition_detection", Asks::kAnyValue, "'repetition_detection'"},
    {"logits_processors", Asks::kAnyValue, "'logits_processors'"},
    {"kv_transfer_params", Asks::kAnyValue, "'kv_transfer_params' (disaggregated serving)"},
    {"ec_transfer_params", Asks::kAnyValue, "'ec_transfer_params' (disaggregated serving)"},
    {"vllm_xargs", Asks::kNonEmpty, "'vllm_xargs' (custom extensions)"},
};

constexpr Refusal kChatOnly[] = {
    {"functions", Asks::kAnyValue, "The deprecated 'functions' (use 'tools')"},
    {"function_call", Asks::kAnyValue, "The deprecated 'function_call' (use 'tools')"},
    {"documents", Asks::kNonEmpty, "'documents' (the V4 chat encoding has no documents; put them in a message)"},
    {"media_io_kwargs", Asks::kNonEmpty, "'media_io_kwargs' (a text-only model)"},
    {"mm_processor_kwargs", Asks::kNonEmpty, "'mm_processor_kwargs' (a text-only model)"},
    {"return_prompt_text", Asks::kTrue, "'return_prompt_text'"},
    {"echo", Asks::kTrue, "'echo' in chat"},
};

constexpr Refusal kCompletionsOnly[] = {
    {"suffix", Asks::kNonEmpty, "'suffix'"},
    {"prompt_embeds", Asks::kAnyValue, "'prompt_embeds'"},
};

bool asks(const RequestFields& f, const Refusal& r) {
  const Json* v = f.get(r.field);
  if (v == nullptr) return false;
  switch (r.asks) {
    case Asks::kAnyValue:
      return true;
    case Asks::kTrue:
      return f.boolean(r.field).value_or(false);  // a wrong type is refused by name too
    case Asks::kNonEmpty:
      return v->is_string() ? !v->get_ref<const std::string&>().empty() : !(v->is_structured() && v->empty());
  }
  return true;
}

void refuse(const RequestFields& f, std::span<const Refusal> refusals) {
  for (const Refusal& r : refusals) {
    if (asks(f, r)) not_supported(r.field, r.what);
  }
}

// The refusals that depend on a value, not on its presence.
void refuse_values(const RequestFields& f) {
  if (const auto best_of = f.integer("best_of"); best_of && *best_of != f.integer("n").value_or(1)) {
    not_supported("best_of", "'best_of' other than 'n'");
  }
  if (f.integer("thinking_token_budget").value_or(-1) != -1) {
    not_supported("thinking_token_budget", "'thinking_token_budget' (other than -1, unlimited)");
  }
  // Every token is streamed as it comes: the server's interval is 1.
  if (f.integer_in("stream_interval", 1, INT64_MAX).value_or(1) != 1) {
    not_supported("stream_interval", "'stream_interval' above 1");
  }
}

// Fields vLLM takes and, for this model, does nothing with: their types are still checked.
void check_no_effect_fields(const RequestFields& f) {
  f.string("user");                                           // "ignored by vLLM"
  f.number("length_penalty");                                 // beam search only
  f.boolean("early_stopping");                                // beam search only
  f.boolean("spaces_between_special_tokens");                 // V4's byte-level detokenizer joins tokens as they are
  f.boolean("add_special_tokens");                            // V4's tokenizer adds no BOS or EOS of its own
  f.string("session_id");                                     // affinity for routers in front of many engines
  f.boolean("return_token_offsets");                          // the render endpoints only
  f.boolean("return_mm_kwargs");                              // the render endpoints only
  f.integer_in("routed_experts_prompt_start", 0, INT64_MAX);  // needs --enable-return-routed-experts
  f.string("guided_decoding_backend");                        // one grammar engine here, whichever is named
}

// The V4 prompt is the official encoder's (chat/encoding.h); DeepSeek ships no Jinja template.
void refuse_chat_template(const RequestFields& f) {
  if (f.get("chat_template") == nullptr) return;
  f.string("chat_template");
  not_supported("chat_template", "'chat_template' (V4's prompt is the official encoder's, not a Jinja template)");
}

}  // namespace

void refuse_unsupported(const RequestFields& f, Endpoint endpoint) {
  refuse(f, kBoth);
  refuse_values(f);
  check_no_effect_fields(f);
  if (endpoint == Endpoint::kChat) {
    refuse(f, kChatOnly);
    refuse_chat_template(f);
  } else {
    refuse(f, kCompletionsOnly);
  }
}

}  // namespace dsv4::server
