// Assistant prefill: a chat that ends with an assistant turn for the model to continue (vLLM's
// continue_final_message, DeepSeek's `"prefix": true` on that message). The turn is rendered open: no
// end-of-sentence after it (the official encoder's wo_eos), and in thinking mode, when it holds
// reasoning but no content or tool calls yet, no </think> either, so that the model goes on reasoning
// instead of answering. Where the prompt ends decides how the generated text is parsed: only text that
// starts inside the reasoning is split at </think>.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "chat/encoding.h"

namespace dsv4::chat {

struct ChatPrompt {
  std::string text;
  ThinkingMode parse_mode = ThinkingMode::kChat;  // kThinking: the generated text starts in the reasoning
};

// The prompt for `messages`; with `continue_final`, their last message (an assistant one, else
// dsv4::Error) is continued. Without it, the parse mode is the request's thinking mode when the prompt
// ends with the generation prompt, and chat when options.add_generation_prompt is off.
ChatPrompt encode_chat_prompt(nlohmann::ordered_json messages, const EncodeOptions& options, bool continue_final);

}  // namespace dsv4::chat
