// GPT-2's byte-level alphabet: every byte stands for one printable code point, so a BPE vocabulary of
// strings covers arbitrary bytes (0x20 ' ' -> U+0120 'Ġ', 0x0A -> U+010A 'Ċ', '!'..'~' -> themselves).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::byte_level {

char32_t byte_to_codepoint(uint8_t b);
// The byte that a code point stands for, or -1 when it is not in the alphabet.
int codepoint_to_byte(char32_t cp);

// The byte-level text of raw bytes (how the vocabulary spells them).
std::string encode(std::string_view bytes);
// Bytes of one token as HF's ByteLevel decoder gives them: the bytes its characters stand for when all of
// them are in the alphabet, else the token's own UTF-8 (e.g. "<｜User｜>"). Token text must be valid UTF-8.
std::string decode_token(std::string_view token);

}  // namespace dsv4::byte_level
