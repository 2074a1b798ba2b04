// A server that cannot be starved: half-open sockets hold no thread, bodies over the limit are refused
// while they arrive (chunked included) without the memory they would take, probes answer while every
// generation thread is busy, a burst's threads are returned, slow clients time out, and keep-alive,
// pipelining and "Expect: 100-continue" still work.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <random>
#include <thread>

#include "raw_client.h"
#include "server_test_support.h"

namespace dsv4::server {
namespace {

using servertest::connect_loopback;
using servertest::has_responses;
using servertest::read_until;
using servertest::send_all;
using servertest::status_at;
using servertest::TestServer;
using servertest::TestServerOptions;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class ConnectionLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override { DSV4_REQUIRE_TOKENIZER(); }
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Status and wall time of one request through a fresh client.
std::pair<int, double> timed(TestServer& s, const std::string& method, const std::string& path,
                             const std::string& body = {}) {
  auto c = s.client();
  c.set_read_timeout(5);
  const auto t0 = Clock::now();
  const auto r = method == "GET" ? c.Get(path) : c.Post(path, body, "application/json");
  return {r ? r->status : 0, seconds_since(t0)};
}

bool wait_for(const std::function<bool()>& ok, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!ok()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// What a slowloris sends: every kind of unfinished request, in random order.
std::string half_request(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0:
      return "";  // connected, silent
    case 1:
      return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Ty";
    case 2:
      return "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"prompt\": \"";
    default:
      return "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"mes\r\n";
  }
}

TEST_F(ConnectionLimitsTest, TwoThousandHalfOpenSocketsStarveNothing) {
  // Client and server sockets live in this process: 2,000 of each where the hard limit allows, else as
  // many as it does (CI fails on a skipped test; 256 stalled sockets already starved the old server).
  int kSockets = 2000;
  while (kSockets > 256 && !servertest::ensure_descriptors(2 * kSockets + 512)) kSockets /= 2;
  ASSERT_TRUE(servertest::ensure_descriptors(2 * kSockets + 512)) << "RLIMIT_NOFILE below " << 2 * kSockets + 512;
  if (kSockets < 2000) std::printf("descriptor limit: %d half-open sockets instead of 2,000\n", kSockets);
  TestServerOptions o;
  o.config.http_threads = 16;  // with a thread per connection, 16 stalled POSTs starved the old server
  o.config.keep_alive_timeout = o.config.header_timeout = o.config.body_timeout = 120;  // none times out here
  TestServer s(o);
  ASSERT_EQ(timed(s, "GET", "/health").first, 200);  // threads and buffers of a first request exist now
  const int64_t before = servertest::resident_bytes();
  std::mt19937_64 rng(std::random_device{}());
  std::vector<int> socks;
  for (int i = 0; i < kSockets; ++i) {
    const int fd = connect_loopback(s.port());
    ASSERT_GE(fd, 0) << "connection " << i;
    ASSERT_TRUE(send_all(fd, half_request(rng)));
    socks.push_back(fd);
  }
  ASSERT_TRUE(wait_for([&] { return s.server().connections() >= static_cast<size_t>(kSockets); }, 10s))
      << s.server().connections();

  const auto [health, health_s] = timed(s, "GET", "/health");
  EXPECT_EQ(health, 200);
  EXPECT_LT(health_s, 1.0);
  const auto [gen, gen_s] = timed(s, "POST", "/v1/completions", R"({"prompt": "Hi", "max_tokens": 4})");
  EXPECT_EQ(gen, 200);
  EXPECT_LT(gen_s, 1.0);
  const auto [metrics, metrics_s] = timed(s, "GET", "/metrics");
  EXPECT_EQ(metrics, 200);
  EXPECT_LT(metrics_s, 1.0);
  EXPECT_LE(s.server().request_threads(), 16u + 8u);  // the sockets hold none; the pools' own sizes bound it
  const int64_t grown = servertest::resident_bytes() - before;
  EXPECT_LT(grown, int64_t{32} << 20) << kSockets << " half-open sockets took " << grown
                                      << " bytes";  // not 64 KiB each

  for (const int fd : socks) ::close(fd);
  EXPECT_TRUE(wait_for([&] { return s.server().connections() < 10; }, 10s)) << s.server().connections();
}

TEST_F(ConnectionLimitsTest, ChunkedBodyOverTheLimitIs413WithoutTheMemory) {
  TestServerOptions o;
  o.config.max_request_bytes = 1 << 20;
  TestServer s(o);
  ASSERT_EQ(timed(s, "GET", "/health").first, 200);  // threads and buffers of a first request exist now
  const int64_t before = servertest::resident_bytes();
  const int fd = connect_loopback(s.port());
  ASSERT_TRUE(send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  std::mt19937_64 rng(std::random_device{}());
  std::string chunk(64 << 10, '\0');
  for (char& c : chunk) c = static_cast<char>('a' + rng() % 26);
  const std::string framed = fmt::format("{:x}\r\n", chunk.size()) + chunk + "\r\n";
  std::string answer;
  size_t sent = 0;
  for (; sent < (size_t{64} << 20) && answer.empty(); sent += chunk.size()) {       // 64 MiB, like the issue's
    if (!send_all(fd, framed)) break;                                               // the server closed
    answer = read_until(fd, 0ms, [](const std::string& a) { return !a.empty(); });  // an early answer, as curl reads
  }
  bool closed = false;
  answer += read_until(
      fd, 5s, [](const std::string& a) { return has_responses(a, 1); }, &closed);
  ::close(fd);
  EXPECT_TRUE(status_at(answer) == 413 || (answer.empty() && closed)) << answer;
  if (!answer.empty()) {
    EXPECT_NE(answer.find("--max-request-bytes"), std::string::npos) << answer;
  }
  EXPECT_LT(sent, size_t{32} << 20) << "the server read on long after the limit";
  const int64_t grown = servertest::resident_bytes() - before;
  EXPECT_LT(grown, int64_t{16} << 20) << "resident memory grew by " << grown << " bytes";
  EXPECT_EQ(timed(s, "GET", "/health").first, 200);
}

TEST_F(ConnectionLimitsTest, BodiesInFlightAreBoundedInAll) {
  TestServerOptions o;
  o.config.max_request_bytes = 256 << 10;
  o.config.max_buffered_request_bytes = 1 << 20;
  TestServer s(o);
  std::mt19937_64 rng(std::random_device{}());
  std::string part(200 << 10, '\0');  // of a 256 KiB body that never ends
  for (char& c : part) c = static_cast<char>('a' + rng() % 26);
  int refused = 0;
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) {  // 8 x 200 KiB > 1 MiB
    const int fd = connect_loopback(s.port());
    ASSERT_TRUE(send_all(fd, fmt::format("POST /tokenize HTTP/1.1\r\nContent-Length: {}\r\n\r\n", 256 << 10)));
    send_all(fd, part);  // may fail once the server refused
    const std::string answer = read_until(fd, 300ms, [](const std::string& a) { return has_responses(a, 1); });
    if (status_at(answer) == 503) {
      ++refused;
      EXPECT_NE(answer.find("Retry-After: 1"), std::string::npos) << answer;
      ::close(fd);
    } else {
      EXPECT_EQ(answer, "");
      held.push_back(fd);
    }
  }
  EXPECT_GE(refused, 2);  // at most 1 MiB of the 1.6 MiB is held
  EXPECT_GE(held.size(), 4u);
  EXPECT_EQ(timed(s, "GET", "/health").first, 200);  // a request without a body is never refused for it
  for (const int fd : held) ::close(fd);
  EXPECT_TRUE(wait_for([&] { return timed(s, "POST", "/tokenize", R"({"prompt": "x"})").first == 200; }, 5s))
      << "the budget was not given back";
}

TEST_F(ConnectionLimitsTest, ContentLengthOverTheLimitIs413BeforeTheBodyAndExpectContinueWorks) {
  TestServerOptions o;
  o.config.max_request_bytes = 1000;
  TestServer s(o);
  const int big = connect_loopback(s.port());
  ASSERT_TRUE(send_all(big, "POST /v1/completions HTTP/1.1\r\nContent-Length: 1001\r\nExpect: 100-continue\r\n\r\n"));
  const std::string refused = read_until(big, 5s, [](const std::string& a) { return has_responses(a, 1); });
  EXPECT_EQ(status_at(refused), 413) << refused;  // no 100 first: the client must not send the body
  EXPECT_NE(refused.find("Connection: close"), std::string::npos);
  ::close(big);

  const std::string body = R"({"prompt": "Hi", "max_tokens": 2})";
  const int ok = connect_loopback(s.port());
  ASSERT_TRUE(send_all(ok, fmt::format("POST /v1/completions HTTP/1.1\r\nContent-Length: {}\r\nExpect: 100-continue"
                                       "\r\nContent-Type: application/json\r\n\r\n",
                                       body.size())));
  const std::string go = read_until(ok, 5s, [](const std::string& a) { return a.find("\r\n\r\n") != a.npos; });
  EXPECT_EQ(go, "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(send_all(ok, body));
  const std::string answer = read_until(ok, 5s, [](const std::string& a) { return has_responses(a, 1); });
  EXPECT_EQ(status_at(answer), 200) << answer;
  EXPECT_EQ(answer.find("100 Continue"), std::string::npos) << "a second 100";
  ::close(ok);
}

TEST_F(ConnectionLimitsTest, ProbesAnswerWhileEveryGenerationThreadIsStalled) {
  TestServerOptions o;
  o.config.http_threads = 2;
  o.step_delay = 5ms;
  TestServer s(o);
  // Two streams whose clients never read: they hold both generation threads (and soon stall on writes).
  std::vector<int> stalled;
  for (int i = 0; i < 2; ++i) {
    const std::string body = R"({"prompt": "Hi", "max_tokens": 3000, "ignore_eos": true, "stream": true})";
    const int fd = connect_loopback(s.port());
    ASSERT_TRUE(
        send_all(fd, fmt::format("POST /v1/completions HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}", body.size(), body)));
    stalled.push_back(fd);
  }
  ASSERT_TRUE(wait_for([&] { return s.engine().stats().running == 2; }, 5s));
  // The generation threads are all taken: another generation waits...
  auto queued = std::async(std::launch::async, [&] { return timed(s, "POST", "/tokenize", R"({"prompt": "x"})"); });
  EXPECT_EQ(queued.wait_for(300ms), std::future_status::timeout);
  // ... while probes and scrapes answer at once.
  for (const char* path : {"/health", "/metrics", "/v1/models", "/version"}) {
    const auto [status, took] = timed(s, "GET", path);
    EXPECT_EQ(status, 200) << path;
    EXPECT_LT(took, 1.0) << path;
  }
  for (const int fd : stalled) ::close(fd);  // the streams end; the queued request runs
  EXPECT_EQ(queued.get().first, 200);
  EXPECT_TRUE(s.wait_idle());
}

TEST_F(ConnectionLimitsTest, ABurstsThreadsAreReturned) {
  TestServerOptions o;
  o.config.http_threads = 64;
  o.config.thread_idle_timeout = 0.2;
  o.step_delay = 2ms;
  TestServer s(o);
  const size_t idle = s.server().request_threads();
  std::vector<std::future<int>> burst;
  for (int i = 0; i < 40; ++i) {
    burst.push_back(std::async(std::launch::async, [&] {
      return timed(s, "POST", "/v1/completions", R"({"prompt": "Hi", "max_tokens": 30, "ignore_eos": true})").first;
    }));
  }
  size_t peak = 0;
  while (
      std::any_of(burst.begin(), burst.end(), [](auto& f) { return f.wait_for(0ms) != std::future_status::ready; })) {
    peak = std::max(peak, s.server().request_threads());
    std::this_thread::sleep_for(5ms);
  }
  for (auto& f : burst) EXPECT_EQ(f.get(), 200);
  EXPECT_GE(peak, 20u) << "the burst did not run concurrently";
  EXPECT_TRUE(wait_for([&] { return s.server().request_threads() <= idle; }, 5s))
      << s.server().request_threads() << " threads after the burst, " << idle << " before";
}

TEST_F(ConnectionLimitsTest, SlowAndIdleClientsTimeOut) {
  TestServerOptions o;
  o.config.keep_alive_timeout = 0.3;
  o.config.header_timeout = 0.5;
  o.config.body_timeout = 0.5;
  TestServer s(o);
  const auto t0 = Clock::now();
  const int silent = connect_loopback(s.port());
  const int trickle = connect_loopback(s.port());
  const int stalled_body = connect_loopback(s.port());
  ASSERT_TRUE(send_all(stalled_body, "POST /tokenize HTTP/1.1\r\nContent-Length: 50\r\n\r\n{\"prompt\""));
  // Headers trickling in a byte at a time never finish in time, however steadily they come.
  const std::string head = "GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: yes\r\n\r\n";
  bool trickle_refused = false;
  std::string trickle_answer;
  for (const char c : head) {
    if (!send_all(trickle, std::string(1, c))) break;
    trickle_answer += read_until(trickle, 50ms, [](const std::string& a) { return !a.empty(); });
    if (!trickle_answer.empty()) {
      trickle_refused = true;
      break;
    }
  }
  trickle_answer += read_until(trickle, 2s, [](const std::string& a) { return has_responses(a, 1); });
  EXPECT_TRUE(trickle_refused);
  EXPECT_EQ(status_at(trickle_answer), 408) << trickle_answer;
  bool closed = false;
  EXPECT_EQ(read_until(
                silent, 3s, [](const std::string&) { return false; }, &closed),
            "");
  EXPECT_TRUE(closed) << "an idle connection stayed open";
  const std::string body_answer =
      read_until(stalled_body, 3s, [](const std::string& a) { return has_responses(a, 1); });
  EXPECT_EQ(status_at(body_answer), 408) << body_answer;
  EXPECT_LT(seconds_since(t0), 4.0);
  for (const int fd : {silent, trickle, stalled_body}) ::close(fd);
}

TEST_F(ConnectionLimitsTest, AnIdleConnectionOutlivesTheOpenAiClientsPoolExpiry) {
  // httpx (the OpenAI client's transport) reuses a connection idle for up to 5 s; a server closing at the
  // same moment loses the request sent on it (seen on CI as "Server disconnected without a response").
  TestServer s;
  const int fd = connect_loopback(s.port());
  ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(status_at(read_until(fd, 5s, [](const std::string& a) { return has_responses(a, 1); })), 200);
  std::this_thread::sleep_for(5200ms);
  ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\n\r\n"));
  bool closed = false;
  const std::string second = read_until(
      fd, 5s, [](const std::string& a) { return has_responses(a, 1); }, &closed);
  EXPECT_EQ(status_at(second), 200) << "closed: " << closed;
  ::close(fd);
}

TEST_F(ConnectionLimitsTest, KeepAliveAndPipelinedRequestsAnswerInOrder) {
  TestServer s;
  const int fd = connect_loopback(s.port());
  const std::string tokenize = R"({"prompt": "Hello world"})";
  // Three requests in one write, the last one with its body split off and sent later.
  ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\n\r\nGET /nowhere HTTP/1.1\r\n\r\n" +
                               fmt::format("POST /tokenize HTTP/1.1\r\nContent-Length: {}\r\n\r\n", tokenize.size()) +
                               tokenize.substr(0, 5)));
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(send_all(fd, tokenize.substr(5)));
  const std::string got = read_until(fd, 5s, [](const std::string& a) { return has_responses(a, 3); });
  ASSERT_TRUE(has_responses(got, 3)) << got;
  EXPECT_EQ(status_at(got), 200);
  const size_t second = got.find("HTTP/1.1 ", 1);
  EXPECT_EQ(status_at(got, second), 404);
  const size_t third = got.find("HTTP/1.1 ", second + 1);
  EXPECT_EQ(status_at(got, third), 200);
  EXPECT_NE(got.find("\"tokens\"", third), std::string::npos);
  // The connection stays open for a fourth.
  ASSERT_TRUE(send_all(fd, "GET /version HTTP/1.1\r\nConnection: close\r\n\r\n"));
  bool closed = false;
  const std::string last = read_until(
      fd, 5s, [](const std::string&) { return false; }, &closed);
  EXPECT_EQ(status_at(last), 200) << last;
  EXPECT_TRUE(closed) << "Connection: close was not honoured";
  ::close(fd);
}

}  // namespace
}  // namespace dsv4::server
