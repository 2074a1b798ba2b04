#include "tokenizer/byte_level.h"

#include <array>

#include "core/utf8.h"

namespace dsv4::byte_level {
namespace {

// Printable Latin-1 bytes keep their code point; the others take 256, 257, ... in byte order.
struct Alphabet {
  std::array<char32_t, 256> to_cp{};
  std::array<int16_t, 324> to_byte{};  // code points < 324 cover the whole alphabet

  Alphabet() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

char32_t byte_to_codepoint(uint8_t b) { return alphabet().to_cp[b]; }

int codepoint_to_byte(char32_t cp) { return cp < alphabet().to_byte.size() ? alphabet().to_byte[cp] : -1; }

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) utf8::append_codepoint(byte_to_codepoint(static_cast<uint8_t>(c)), out);
  return out;
}

std::string decode_token(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const int b = codepoint_to_byte(utf8::next_codepoint(token, i));
    if (b < 0) return std::string(token);
    out += static_cast<char>(b);
  }
  return out;
}

}  // namespace dsv4::byte_level
