// UTF-8 checks and repair, the one repair of the project (tokenizer, detokenizer, chat and tool-call
// JSON): invalid input is repaired the way Python's bytes.decode(errors="replace"), Hugging Face
// tokenizers and Rust's String::from_utf8_lossy do it, Unicode's "substitution of maximal subparts":
// each maximal subpart of an ill-formed sequence (a lead byte with the continuation bytes that still
// fit it, or a byte that cannot start a character) becomes one U+FFFD. So "\xE4\xB8" (a truncated
// character) gives one U+FFFD, "\xE0\x80\xAF" (overlong) and "\xED\xA0\x80" (a surrogate) three.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dsv4::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool is_valid(std::string_view s);

// Length of the well-formed character at s[0] (1-4), or 0 when none starts there (an invalid or
// truncated sequence, or s empty).
size_t valid_length(std::string_view s);

// Appends s to out with invalid subsequences replaced (a truncated sequence at the end included).
void append_lossy(std::string_view s, std::string& out);
std::string lossy(std::string_view s);

// Appends the longest prefix of s that is final, i.e. that later bytes cannot change (invalid subsequences
// replaced), and returns its length in s; the rest is an incomplete but still possibly valid sequence.
size_t append_complete(std::string_view s, std::string& out);

// Length in bytes of the character whose lead byte is b (1 for bytes that cannot lead a sequence).
inline size_t char_length(unsigned char b) { return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

// Decodes the code point at s[i] of valid UTF-8 and advances i.
char32_t next_codepoint(std::string_view s, size_t& i);
// Decodes the code point that ends at s[i] (exclusive) of valid UTF-8 and moves i back to its start.
char32_t prev_codepoint(std::string_view s, size_t& i);
void append_codepoint(char32_t cp, std::string& out);

}  // namespace dsv4::utf8
