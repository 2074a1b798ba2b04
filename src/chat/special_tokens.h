// The DeepSeek-V4 chat special tokens as they appear in prompt and completion text
// (ECOSYSTEM.md §2.2-§2.3). The bars are full-width U+FF5C, the underscore-like mark U+2581.
#pragma once

#include <string_view>

namespace dsv4::chat {

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";  // no angle brackets: tags are "<" + kDsml + name

// Special tokens are written "<｜NAME｜>"; these are the two delimiters.
inline constexpr std::string_view kSpecialOpen = "<｜";
inline constexpr std::string_view kSpecialClose = "｜>";

}  // namespace dsv4::chat
