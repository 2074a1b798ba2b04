#include "core/utf8.h"

#include <cstdint>
#include <cstring>

namespace dsv4::utf8 {
namespace {

enum class Kind { kValid, kInvalid, kTruncated };

struct Sequence {
  size_t length;  // bytes of the character, of the invalid subsequence, or available of a truncated one
  Kind kind;
};

// Classifies the sequence at p (Unicode Table 3-7, well-formed byte sequences).
Sequence classify(const unsigned char* p, size_t avail) {
  const unsigned char b = p[0];
  if (b < 0x80) return {1, Kind::kValid};
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b == 0xE0) {
    need = 2, lo = 0xA0;
  } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
    need = 2;
  } else if (b == 0xED) {
    need = 2, hi = 0x9F;
  } else if (b == 0xF0) {
    need = 3, lo = 0x90;
  } else if (b >= 0xF1 && b <= 0xF3) {
    need = 3;
  } else if (b == 0xF4) {
    need = 3, hi = 0x8F;
  } else {
    return {1, Kind::kInvalid};
  }
  for (size_t k = 1; k <= need; ++k) {
    if (k >= avail) return {k, Kind::kTruncated};
    if (p[k] < lo || p[k] > hi) return {k, Kind::kInvalid};
    lo = 0x80, hi = 0xBF;
  }
  return {need + 1, Kind::kValid};
}

// Length of the ASCII run at the start of s, eight bytes at a time.
size_t ascii_prefix(const unsigned char* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w & 0x8080808080808080ull) break;
  }
  while (i < n && p[i] < 0x80) ++i;
  return i;
}

// Scans s, appending final text to out; stops at a truncated tail unless `finish`. Returns bytes consumed.
size_t scan(std::string_view s, std::string& out, bool finish) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0, run = 0;  // [run, i) is valid text not yet appended
  while (i < n) {
    i += ascii_prefix(p + i, n - i);
    if (i >= n) break;
    const Sequence seq = classify(p + i, n - i);
    if (seq.kind == Kind::kValid) {
      i += seq.length;
      continue;
    }
    out.append(s.data() + run, i - run);
    if (seq.kind == Kind::kTruncated && !finish) return i;
    out.append(kReplacement);
    i += seq.length;
    run = i;
  }
  out.append(s.data() + run, n - run);
  return n;
}

}  // namespace

bool is_valid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    i += ascii_prefix(p + i, n - i);
    if (i >= n) break;
    const Sequence seq = classify(p + i, n - i);
    if (seq.kind != Kind::kValid) return false;
    i += seq.length;
  }
  return true;
}

void append_lossy(std::string_view s, std::string& out) { scan(s, out, true); }

std::string lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  append_lossy(s, out);
  return out;
}

size_t append_complete(std::string_view s, std::string& out) { return scan(s, out, false); }

size_t valid_length(std::string_view s) {
  if (s.empty()) return 0;
  const Sequence seq = classify(reinterpret_cast<const unsigned char*>(s.data()), s.size());
  return seq.kind == Kind::kValid ? seq.length : 0;
}

char32_t next_codepoint(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t len = char_length(b);
  char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

char32_t prev_codepoint(std::string_view s, size_t& i) {
  size_t start = i - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t j = start;
  const char32_t cp = next_codepoint(s, j);
  i = start;
  return cp;
}

void append_codepoint(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace dsv4::utf8
