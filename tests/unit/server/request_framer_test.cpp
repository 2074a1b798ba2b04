// RequestFramer: where requests end however their bytes are split across reads (fresh random bodies, chunk
// sizes and splits), and every refusal with its status, before the body it refuses has arrived.
#include "server/request_framer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace dsv4::server {
namespace {

using State = RequestFramer::State;

std::string random_bytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);  // CRLFs and NULs included: bodies are opaque
  return s;
}

std::string with_length(const std::string& body) {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
         body;
}

std::string chunked(std::mt19937_64& rng, const std::string& body) {
  std::string s = "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (size_t at = 0; at < body.size();) {
    const size_t n = std::min<size_t>(body.size() - at, 1 + rng() % 300);
    s += fmt::format("{:x}{}\r\n", n, rng() % 4 == 0 ? ";ext=1" : "") + body.substr(at, n) + "\r\n";
    at += n;
  }
  return s + "0\r\n\r\n";
}

// Feeds `wire` in random pieces, as reads would deliver it; returns the requests' [begin, end) in `wire`.
std::vector<std::pair<size_t, size_t>> frame_all(const std::string& wire, std::mt19937_64& rng, size_t limit) {
  std::vector<std::pair<size_t, size_t>> out;
  RequestFramer f(limit);
  std::string buffer;
  size_t offset = 0;  // of buffer[0] in wire
  for (size_t at = 0; at < wire.size();) {
    const size_t n = std::min<size_t>(wire.size() - at, 1 + rng() % 97);
    buffer += wire.substr(at, n);
    at += n;
    while (f.feed(buffer) == State::kComplete) {
      out.emplace_back(offset + f.begin(), offset + f.end());
      buffer.erase(0, f.end());
      offset += f.end();
      f.reset();
    }
    EXPECT_NE(f.state(), State::kFailed) << f.error().what();
  }
  return out;
}

TEST(RequestFramer, PipelinedRequestsEndWhereTheyEndHoweverTheBytesArrive) {
  std::mt19937_64 rng(std::random_device{}());
  for (int round = 0; round < 20; ++round) {
    std::string wire;
    std::vector<std::pair<size_t, size_t>> want;
    for (int i = 0; i < 5; ++i) {
      if (rng() % 3 == 0) wire += "\r\n";  // a stray CRLF after a body (RFC 9112 2.2)
      const size_t begin = wire.size();
      const std::string body = random_bytes(rng, rng() % 2000);
      switch (rng() % 3) {
        case 0:
          wire += with_length(body);
          break;
        case 1:
          wire += chunked(rng, body);
          break;
        default:
          wire += "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
      }
      want.emplace_back(begin, wire.size());
    }
    EXPECT_EQ(frame_all(wire, rng, 4096), want) << "round " << round;
  }
}

TEST(RequestFramer, HeadFieldsAndExpectContinue) {
  RequestFramer f(100);
  EXPECT_EQ(f.feed("POST /x?y=1 HTTP/1.1\r\ncontent-length:  5 \r\nEXPECT: 100-Continue\r\n\r\n"), State::kBody);
  EXPECT_EQ(f.head().method, "POST");
  EXPECT_EQ(f.head().target, "/x?y=1");
  EXPECT_TRUE(f.head().expect_continue);
  EXPECT_EQ(f.feed("POST /x?y=1 HTTP/1.1\r\ncontent-length:  5 \r\nEXPECT: 100-Continue\r\n\r\nabcde"),
            State::kComplete);
}

// The error's status for `wire` (0 when it is not refused).
int refusal(const std::string& wire, size_t limit = 1000) {
  RequestFramer f(limit);
  return f.feed(wire) == State::kFailed ? f.error().status() : 0;
}

TEST(RequestFramer, RefusesWhatItCannotFrameWithTheStatusThatSaysWhy) {
  const std::string post = "POST / HTTP/1.1\r\n";
  EXPECT_EQ(refusal(post + "Content-Length: 1001\r\n\r\n"), 413);  // before any of the body
  EXPECT_EQ(refusal(post + "Content-Length: 99999999999999999999999\r\n\r\n"), 413);
  EXPECT_EQ(refusal(post + "Content-Length: 12a\r\n\r\n"), 400);
  EXPECT_EQ(refusal(post + "Content-Length: 5\r\nContent-Length: 6\r\n\r\n"), 400);
  EXPECT_EQ(refusal(post + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(refusal(post + "Transfer-Encoding: gzip, chunked\r\n\r\n"), 501);
  EXPECT_EQ(refusal(post + "Content-Encoding: gzip\r\nContent-Length: 5\r\n\r\n"), 415);
  EXPECT_EQ(refusal(post + "Expect: something\r\n\r\n"), 417);
  EXPECT_EQ(refusal(post + " folded: line\r\n\r\n"), 400);
  EXPECT_EQ(refusal(post + "No colon here\r\n\r\n"), 400);
  // Bare LF or CR: a lenient parser would see a Content-Length this one does not.
  EXPECT_EQ(refusal(post + "X-A: b\nContent-Length: 5\r\n\r\nhello"), 400);
  EXPECT_EQ(refusal(post + "X-A: b\rContent-Length: 5\r\n\r\nhello"), 400);
  EXPECT_EQ(refusal("GET /health HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(refusal("GET /health\r\n\r\n"), 400);
  EXPECT_EQ(refusal("GET  /health HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(refusal("GET /health HTTP/1.1\r\nX: " + std::string(RequestFramer::kMaxHeadBytes, 'a')), 431);
  const std::string te = post + "Transfer-Encoding: chunked\r\n\r\n";
  EXPECT_EQ(refusal(te + "3e9;big\r\n"), 413);                                      // declared, not yet sent
  EXPECT_EQ(refusal(te + "1f4\r\n" + std::string(500, 'x') + "\r\n1f5\r\n"), 413);  // 500 + 501 > 1000
  EXPECT_EQ(refusal(te + "zz\r\n"), 400);
  EXPECT_EQ(refusal(te + "3\r\nabcX"), 400);
  EXPECT_EQ(refusal(te + "0\r\nTrailer: x\r\n\r\n"), 400);
  EXPECT_EQ(refusal(te + "1" + std::string(20, '0') + "\r\n"), 413);  // would overflow 64 bits
  EXPECT_EQ(refusal(te + std::string(20, '0') + "1\r\n", 1000), 0);   // leading zeros are fine
  EXPECT_EQ(refusal(te + "1" + std::string(RequestFramer::kMaxChunkLine, ' ')), 400);
  EXPECT_EQ(refusal(te + "1\r\n"), 0);  // incomplete, not wrong
}

TEST(RequestFramer, ChunkFramingCountsAgainstTheLimit) {
  // One-byte chunks take six bytes each: the framing may not grow the buffer without bound.
  std::string wire = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 20000; ++i) wire += "1\r\nx\r\n";
  EXPECT_EQ(refusal(wire, 50000), 413);  // 20000 bytes of data in 120000 of framing
}

}  // namespace
}  // namespace dsv4::server
