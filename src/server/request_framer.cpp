#include "server/request_framer.h"

#include <algorithm>
#include <cctype>

namespace dsv4::server {
namespace {

constexpr std::string_view kCrlf = "\r\n";

ApiError framing_error(int status, const std::string& message) {
  return ApiError(status, "invalid_request_error", message);
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// RFC 9110's token characters (method and header names).
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
  });
}

// A decimal Content-Length; nullopt when malformed. Values past 10^18 saturate (they are over any limit).
std::optional<uint64_t> parse_length(std::string_view s) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return std::nullopt;
  }
  uint64_t v = 0;
  for (const char c : s) v = std::min<uint64_t>(v * 10 + static_cast<uint64_t>(c - '0'), uint64_t{1} << 62);
  return v;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

RequestFramer::State RequestFramer::feed(std::string_view data) {
  if (state_ == State::kIdle) skip_empty_lines(data);
  if (state_ == State::kHead) scan_head(data);
  if (state_ == State::kBody) {
    if (chunked_) {
      scan_chunks(data);
    } else if (data.size() - body_begin_ >= *content_length_) {
      pos_ = body_begin_ + *content_length_;
      complete();
    }
  }
  return state_;
}

// RFC 9112 2.2: a server should ignore empty lines received before a request line (some clients send a
// CRLF after a POST body).
void RequestFramer::skip_empty_lines(std::string_view data) {
  while (data.substr(pos_, 2) == kCrlf) pos_ += 2;
  if (pos_ < data.size() && !(data.size() - pos_ == 1 && data[pos_] == '\r')) {
    state_ = State::kHead;
    begin_ = pos_;
  }
}

void RequestFramer::scan_head(std::string_view data) {
  const size_t from = std::max(begin_, pos_ >= 3 ? pos_ - 3 : 0);  // the end marker may straddle two reads
  const size_t at = data.find("\r\n\r\n", from);
  if (at == std::string_view::npos || at + 4 - begin_ > kMaxHeadBytes) {
    pos_ = data.size();
    if (data.size() - begin_ > kMaxHeadBytes) {
      fail(framing_error(431, fmt::format("The request line and headers are larger than {} bytes", kMaxHeadBytes)));
    }
    return;
  }
  pos_ = at + 4;
  parse_head(data.substr(begin_, at - begin_));
  if (state_ != State::kFailed) start_body();
}

void RequestFramer::parse_head(std::string_view head) {
  // A bare CR or LF would end a line for a lenient parser and not for this one: cpp-httplib, which parses
  // the request next, must never see other headers than the ones the framing was decided on.
  for (size_t i = 0; i < head.size(); ++i) {
    if ((head[i] == '\n' && (i == 0 || head[i - 1] != '\r')) || (head[i] == '\r' && head.substr(i, 2) != kCrlf)) {
      return fail(framing_error(400, "Malformed request head: a line ends without CRLF"));
    }
  }
  size_t eol = head.find(kCrlf);
  parse_request_line(head.substr(0, eol));
  while (eol != std::string_view::npos && state_ != State::kFailed) {
    head.remove_prefix(eol + 2);
    eol = head.find(kCrlf);
    parse_header(head.substr(0, eol));
  }
}

void RequestFramer::parse_request_line(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos || sp2 == sp1 + 1) {
    return fail(framing_error(400, "Malformed request line: expected \"METHOD TARGET HTTP/1.1\""));
  }
  head_.method = std::string(line.substr(0, sp1));
  head_.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(head_.method)) return fail(framing_error(400, "Malformed request line: the method is not a token"));
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    if (version.substr(0, 5) == "HTTP/") {
      return fail(framing_error(505, fmt::format("{} is not supported: use HTTP/1.1", version)));
    }
    return fail(framing_error(400, "Malformed request line: expected \"METHOD TARGET HTTP/1.1\""));
  }
}

void RequestFramer::parse_header(std::string_view line) {
  if (!line.empty() && (line.front() == ' ' || line.front() == '\t')) {
    return fail(framing_error(400, "Malformed header: obsolete line folding is not accepted"));
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) {
    return fail(framing_error(400, "Malformed header line: expected \"Name: value\""));
  }
  const std::string name = lower(line.substr(0, colon));
  const std::string_view value = trim(line.substr(colon + 1));
  if (name == "content-length") {
    const auto n = parse_length(value);
    if (!n || (content_length_ && *content_length_ != *n)) {
      return fail(framing_error(400, fmt::format("Invalid Content-Length: \"{}\"", value)));
    }
    content_length_ = n;
  } else if (name == "transfer-encoding") {
    if (chunked_ || lower(value) != "chunked") {
      return fail(framing_error(501, fmt::format("Transfer-Encoding \"{}\" is not supported: send the body with "
                                                 "Content-Length or as chunked alone",
                                                 value)));
    }
    chunked_ = true;
  } else if (name == "content-encoding" && !value.empty() && lower(value) != "identity") {
    fail(
        framing_error(415, fmt::format("Content-Encoding \"{}\" is not supported: send the body uncompressed", value)));
  } else if (name == "expect") {
    if (lower(value) != "100-continue")
      return fail(framing_error(417, fmt::format("Expect \"{}\" is not supported", value)));
    head_.expect_continue = true;
  }
}

void RequestFramer::start_body() {
  if (chunked_ && content_length_) {
    return fail(framing_error(400, "A request must not have both Content-Length and Transfer-Encoding"));
  }
  if (content_length_ && *content_length_ > max_body_) return fail(payload_too_large(max_body_));
  body_begin_ = pos_;
  if (chunked_ || content_length_.value_or(0) > 0) {
    state_ = State::kBody;
  } else {
    complete();
  }
}

void RequestFramer::scan_chunks(std::string_view data) {
  while (state_ == State::kBody && pos_ < data.size()) {
    switch (chunk_) {
      case Chunk::kSize:
        if (!read_chunk_size(data)) return;
        break;
      case Chunk::kData: {
        const auto take = std::min<uint64_t>(chunk_left_, data.size() - pos_);
        pos_ += static_cast<size_t>(take);
        chunk_left_ -= take;
        if (chunk_left_ == 0) chunk_ = Chunk::kDataEnd;
        break;
      }
      case Chunk::kDataEnd:
        if (!expect_crlf(data, "after a chunk's data")) return;
        chunk_ = Chunk::kSize;
        break;
      case Chunk::kLastEnd:
        if (!expect_crlf(data, "after the last chunk (trailer fields are not supported)")) return;
        complete();
        break;
    }
  }
}

// Reads one "HEX[;extensions]\r\n" line; false when it is incomplete or invalid. The declared size counts
// against the limit at once, so an oversized body is refused before its data is read.
bool RequestFramer::read_chunk_size(std::string_view data) {
  const size_t eol = data.find(kCrlf, pos_);
  if (eol == std::string_view::npos) {
    if (data.size() - pos_ > kMaxChunkLine)
      fail(framing_error(400, "Malformed chunked body: a chunk-size line is too long"));
    return false;
  }
  const std::string_view line = data.substr(pos_, eol - pos_);
  uint64_t size = 0;
  size_t i = 0;
  for (; i < line.size() && hex_digit(line[i]) >= 0; ++i) {
    if (size >> 56 != 0) {  // past any limit, and the next digit would overflow
      fail(payload_too_large(max_body_));
      return false;
    }
    size = size * 16 + static_cast<uint64_t>(hex_digit(line[i]));
  }
  const std::string_view rest = trim(line.substr(i));
  if (i == 0 || (!rest.empty() && rest.front() != ';')) {
    fail(framing_error(400, "Malformed chunked body: a chunk size must be hexadecimal"));
    return false;
  }
  pos_ = eol + 2;
  if (size == 0) {
    chunk_ = Chunk::kLastEnd;
    return true;
  }
  body_bytes_ += size;
  // The framing around the data counts too: a body of one-byte chunks must not buffer six times the limit.
  if (body_bytes_ > max_body_ || pos_ - body_begin_ > max_body_ + kMaxHeadBytes) {
    fail(payload_too_large(max_body_));
    return false;
  }
  chunk_left_ = size;
  chunk_ = Chunk::kData;
  return true;
}

bool RequestFramer::expect_crlf(std::string_view data, std::string_view what) {
  if (data.size() - pos_ < 2) {
    if (data[pos_] != '\r') fail(framing_error(400, fmt::format("Malformed chunked body: CRLF expected {}", what)));
    return false;
  }
  if (data.substr(pos_, 2) != kCrlf) {
    fail(framing_error(400, fmt::format("Malformed chunked body: CRLF expected {}", what)));
    return false;
  }
  pos_ += 2;
  return true;
}

void RequestFramer::fail(ApiError e) {
  state_ = State::kFailed;
  error_ = std::move(e);
}

}  // namespace dsv4::server
