// UTF-8 validity: model output may carry broken byte sequences, but JSON text handed to clients
// (tool-call names and arguments) must be valid UTF-8.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dsv4::chat {

// Length of the well-formed UTF-8 character at s[0] (1-4), or 0 when it is not well-formed
// (bad lead byte, missing continuation, overlong form, surrogate, beyond U+10FFFF).
size_t utf8_char_length(std::string_view s);

// s with every byte that does not start a well-formed character replaced by U+FFFD.
std::string to_valid_utf8(std::string_view s);

}  // namespace dsv4::chat
