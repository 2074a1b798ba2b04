// UTF-8 checks and repair. Invalid input is repaired the way Python's errors="replace" and Rust's
// String::from_utf8_lossy do it: each maximal invalid subsequence becomes one U+FFFD.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dsv4::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool is_valid(std::string_view s);

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
