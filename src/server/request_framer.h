// Where one HTTP/1.1 request ends in the bytes a connection has sent, decided while they arrive and before
// anything handles them, so that the server reads requests without a thread per connection and refuses an
// oversized body as soon as it is announced (Content-Length) or grows past the limit (chunked: the chunk
// sizes are counted as they are declared, before their data arrives).
//
// The framer reads the request line and headers (at most kMaxHeadBytes), then the body by Content-Length or
// the chunked transfer coding. It is strict wherever framing would be ambiguous or would need decoding it
// does not do: both Content-Length and Transfer-Encoding, differing Content-Lengths, codings other than
// chunked, chunked trailers, a compressed body (Content-Encoding: a small body could inflate past the limit)
// are refused with the status that names the fault, never guessed at. It copies and decodes nothing:
// cpp-httplib parses the framed bytes afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace dsv4::server {

// What the server needs of a request before handing it on.
struct RequestHead {
  std::string method;
  std::string target;
  bool expect_continue = false;  // "Expect: 100-continue": the client waits for a 100 before the body
};

class RequestFramer {
 public:
  static constexpr size_t kMaxHeadBytes = 64 << 10;  // request line and headers (cpp-httplib's lines are 8 KiB)
  static constexpr size_t kMaxChunkLine = 1 << 10;   // a chunk-size line, extensions included

  enum class State { kIdle, kHead, kBody, kComplete, kFailed };

  explicit RequestFramer(size_t max_body_bytes) : max_body_(max_body_bytes) {}

  // `data` holds the connection's unconsumed bytes: what the last call saw plus whatever arrived since.
  // Returns the state after scanning the new bytes.
  State feed(std::string_view data);
  // Starts over for the next request, after the caller dropped the first end() bytes of its buffer.
  void reset() { *this = RequestFramer(max_body_); }

  State state() const { return state_; }
  // kComplete: the request's bytes are data[begin(), end()) (empty lines before a request are skipped).
  size_t begin() const { return begin_; }
  size_t end() const { return pos_; }
  const RequestHead& head() const { return head_; }
  // kFailed: the answer (400, 413, 415, 417, 431, 501 or 505).
  const ApiError& error() const { return *error_; }

 private:
  enum class Chunk { kSize, kData, kDataEnd, kLastEnd };

  void skip_empty_lines(std::string_view data);
  void scan_head(std::string_view data);
  void parse_head(std::string_view head);
  void parse_request_line(std::string_view line);
  void parse_header(std::string_view line);
  void start_body();
  void scan_chunks(std::string_view data);
  bool read_chunk_size(std::string_view data);
  bool expect_crlf(std::string_view data, std::string_view what);
  void complete() { state_ = State::kComplete; }
  void fail(ApiError e);

  size_t max_body_;
  State state_ = State::kIdle;
  size_t begin_ = 0;  // first byte of the request
  size_t pos_ = 0;    // bytes scanned
  RequestHead head_;
  std::optional<uint64_t> content_length_;
  bool chunked_ = false;
  size_t body_begin_ = 0;
  Chunk chunk_ = Chunk::kSize;
  uint64_t chunk_left_ = 0;
  uint64_t body_bytes_ = 0;  // declared chunk sizes so far
  std::optional<ApiError> error_;
};

}  // namespace dsv4::server
