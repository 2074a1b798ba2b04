// Validation of chat messages before encoding: every error is a dsv4::Error naming the field,
// e.g. `messages[2].role: unknown role "bot"`, where the official encoder would assert, raise a
// KeyError, or silently print a Python repr into the prompt.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace dsv4::chat {

// Checks a JSON array of messages (`what` names it in errors) and returns it normalised: content
// given as a list of text parts becomes one string (parts joined by "\n\n"), except on tool
// messages, whose lists the encoder renders itself.
nlohmann::ordered_json check_messages(const nlohmann::ordered_json& messages, std::string_view what = "messages");

}  // namespace dsv4::chat
