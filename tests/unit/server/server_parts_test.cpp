// The smaller parts of the server: the error envelope, admission counts, the connection probe, the
// elastic thread pool, the progress bar, the startup summary and the stats line.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>

#include "core/progress_bar.h"
#include "server/admission.h"
#include "server/api_error.h"
#include "server/connection_probe.h"
#include "server/elastic_thread_pool.h"
#include "server/request_fields.h"
#include "server/startup_summary.h"
#include "server/stats_logger.h"

namespace dsv4::server {
namespace {

TEST(ApiError, EnvelopeShape) {
  const Json j = Json::parse(error_body(ApiError(400, "invalid_request_error", "bad", "temperature")));
  EXPECT_EQ(j, Json::parse(R"({"error": {"message": "bad", "type": "invalid_request_error", "param": "temperature",
                                "code": 400}})"));
  const Json c = Json::parse(error_body(context_length_exceeded(100, 90, 20)));
  EXPECT_EQ(c["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(c["error"]["message"],
            "This model's maximum context length is 100 tokens. However, you requested 110 tokens (90 in the messages, "
            "20 in the completion). Please reduce the length of the messages or completion.");
  EXPECT_EQ(Json::parse(error_body(unauthorized()))["error"]["type"], "authentication_error");
}

TEST(Admission, BoundsRunningPlusWaiting) {
  Admission a(2, 1);
  EXPECT_TRUE(a.try_acquire(2));
  EXPECT_FALSE(a.try_acquire(2));  // 4 > 2 running + 1 waiting
  ASSERT_TRUE(a.try_acquire(1));
  {
    AdmissionTicket t(a, 1);  // owns the last acquisition
    EXPECT_EQ(a.engine_requests(), 3);
    EXPECT_EQ(a.http_requests(), 2);
    EXPECT_FALSE(a.try_acquire(1));
  }
  EXPECT_EQ(a.engine_requests(), 2);
  EXPECT_TRUE(a.try_acquire(1));
}

TEST(ConnectionProbe, HooksRunOnceWhenThePeerLeavesAndNeverAfterDetach) {
  auto watch = std::make_shared<PeerWatch>();
  ProbeScope scope(watch);
  const ConnectionProbe probe = ConnectionProbe::current();
  EXPECT_TRUE(probe.found());
  EXPECT_FALSE(probe.closed());
  int fired = 0;
  probe.on_close([&] { ++fired; });
  watch->mark_closed();
  watch->mark_closed();  // epoll may report FIN and then RST
  EXPECT_TRUE(probe.closed());
  EXPECT_EQ(fired, 1);
  probe.on_close([&] { fired += 10; });  // registered after the close: runs at once
  EXPECT_EQ(fired, 11);
  auto later = std::make_shared<PeerWatch>();
  ConnectionProbe(later).on_close([&] { fired += 100; });
  later->detach();  // the request was answered before the client left
  later->mark_closed();
  EXPECT_EQ(fired, 11);
  EXPECT_FALSE(ConnectionProbe().found());
  EXPECT_FALSE(ConnectionProbe().closed());
}

TEST(ElasticThreadPool, GrowsToRunBlockingJobsConcurrentlyThenReturnsTheThreads) {
  ElasticThreadPool pool("test", 1, 8, std::chrono::milliseconds(100));
  std::atomic<int> started{0};
  std::atomic<bool> release{false};
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(pool.enqueue([&] {
      ++started;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }));
  }
  for (int i = 0; i < 2000 && started < 6; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(started, 6);  // no job waits behind a blocked one
  EXPECT_GE(pool.threads(), 6u);
  EXPECT_LE(pool.threads(), 8u);
  release = true;
  for (int i = 0; i < 300 && pool.threads() > 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(pool.threads(), 1u);  // the burst's threads left after 100 ms idle; the minimum stays
  std::atomic<int> after{0};
  ASSERT_TRUE(pool.enqueue([&] { ++after; }));
  pool.shutdown();
  EXPECT_EQ(after, 1);  // queued work runs before shutdown returns
  EXPECT_FALSE(pool.enqueue([] {}));
}

TEST(ProgressBar, Render) {
  ProgressBar bar("Loading", 200 << 20, "MiB", 1 << 20);
  EXPECT_EQ(bar.render(50 << 20, 2.0, 8), "Loading  25% |##      | 50.0/200.0 MiB  25.0 MiB/s  0:02");
  ProgressBar count("Requests", 10);
  EXPECT_EQ(count.render(10, 0, 4), "Requests 100% |####| 10/10  0:00");
  bar.finish();
  count.finish();
}

TEST(StartupSummary, CurlLineAndCapacity) {
  EXPECT_EQ(base_url("0.0.0.0", 8000), "http://127.0.0.1:8000");
  EXPECT_EQ(base_url("::1", 80), "http://[::1]:80");
  EXPECT_EQ(curl_example("http://h:1", "m", false),
            "curl http://h:1/v1/chat/completions -H 'Content-Type: application/json' -d '{\"model\": \"m\", "
            "\"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], \"max_tokens\": 32}'");
  EXPECT_NE(curl_example("http://h:1", "m", true).find("Bearer $DSV4_API_KEY"), std::string::npos);
  StartupFacts f;
  f.model_name = "m";
  f.max_model_len = 1000;
  f.kv_tokens = 2500;
  f.pools = {{4096, 10, "swa"}};
  f.host = "127.0.0.1";
  f.port = 9;
  const std::string s = startup_summary(f);
  EXPECT_NE(s.find("2500 tokens = 2.50 sequences of max_model_len"), std::string::npos) << s;
  EXPECT_NE(s.find("10 pages x 4.0 KiB = 40.0 KiB  (swa)"), std::string::npos) << s;
  EXPECT_EQ(s.find("host tier"), std::string::npos) << "the tier is off: " << s;
  f.offload_bytes = int64_t{3} << 30;
  f.host_tier_tokens = 900000;
  EXPECT_NE(startup_summary(f).find("KV host tier 3.00 GiB (--kv-offload-bytes): 900000 tokens"), std::string::npos)
      << startup_summary(f);
  EXPECT_NE(s.find("curl http://127.0.0.1:9/v1/chat/completions"), std::string::npos);
  EXPECT_EQ(s.find("per rank"), std::string::npos) << "one rank: " << s;
  f.parallel = {"parallel   tp 2 x dp 1, experts sliced by tp (2 GPUs)", "  rank 1 (dp 0, tp 1): heads 2-3"};
  f.rank_weight_bytes = int64_t{5} << 30;
  const std::string two = startup_summary(f);
  EXPECT_NE(two.find("  parallel   tp 2 x dp 1"), std::string::npos) << two;
  EXPECT_NE(two.find("rank 1 (dp 0, tp 1): heads 2-3"), std::string::npos) << two;
  EXPECT_NE(two.find("per rank     weights 5.00 GiB, KV pools"), std::string::npos) << two;
}

TEST(StatsLogger, ThroughputOverTheInterval) {
  StatsLogger log;
  EngineStats s;
  const auto t0 = StatsLogger::Clock::now();
  EXPECT_FALSE(log.next(s, t0).has_value());
  s.generation_tokens = 50;
  s.computed_tokens = 250;  // 200 prompt + 50 decode
  s.running = 3;
  s.prefix_query_tokens = 100;
  s.prefix_hit_tokens = 25;
  s.pools = {{1, 10, 5, 0, 5}};
  const auto line = log.next(s, t0 + std::chrono::seconds(5));
  ASSERT_TRUE(line.has_value());
  EXPECT_FALSE(line->idle);
  EXPECT_EQ(line->text,
            "Engine 000: Avg prompt throughput: 40.0 tokens/s, Avg generation throughput: 10.0 tokens/s, Running: 3 "
            "reqs, Waiting: 0 reqs, KV cache usage: 50.0%, Prefix cache hit rate: 25.0%");
  s.running = 0;
  s.pools = {{1, 10, 0, 0, 10}};
  EXPECT_TRUE(log.next(s, t0 + std::chrono::seconds(10))->idle);
  s.device_memory_used = int64_t{3} << 30, s.device_memory_peak = int64_t{7} << 29;  // a GPU's counters
  EXPECT_NE(log.next(s, t0 + std::chrono::seconds(15))->text.find(", GPU memory: 3.0 GiB in use (peak 3.5 GiB)"),
            std::string::npos);
  StatsLogger second(1);  // a data-parallel replica's own line
  second.next(s, t0);
  EXPECT_EQ(second.next(s, t0 + std::chrono::seconds(1))->text.rfind("Engine 001: ", 0), 0u);
}

}  // namespace
}  // namespace dsv4::server
