// The serving benchmark: the random dataset, vLLM's statistics and result block, and a whole run of the
// load generator (bench_client/) against an in-process server speaking the OpenAI SSE format.
#include <gtest/gtest.h>

#include <random>

#include "bench_client/bench_dataset.h"
#include "bench_client/bench_report.h"
#include "bench_client/bench_runner.h"
#include "server_test_support.h"

namespace dsv4::bench {
namespace {

TEST(BenchDataset, LengthsIdsAndSeed) {
  RandomDatasetOptions o{
      .num_prompts = 50, .input_len = 100, .output_len = 10, .range_ratio = 0.2, .vocab_size = 1000, .seed = 5};
  const auto a = random_dataset(o), b = random_dataset(o);
  ASSERT_EQ(a.size(), 50u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_GE(a[i].prompt.size(), 80u);
    EXPECT_LE(a[i].prompt.size(), 120u);
    EXPECT_GE(a[i].output_len, 8);
    EXPECT_LE(a[i].output_len, 12);
    for (const int32_t t : a[i].prompt) EXPECT_TRUE(t >= 10 && t < 990);
    EXPECT_EQ(a[i].prompt, b[i].prompt);
  }
  o.range_ratio = 0;
  for (const auto& r : random_dataset(o)) EXPECT_EQ(r.prompt.size(), 100u);
}

TEST(BenchReport, PercentilesLikeNumpy) {
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
}

TEST(BenchReport, SummaryAndVllmLayout) {
  std::vector<RequestRecord> recs(3);
  recs[0] = {true, "", 10, 5, 0.1, 0.5, {0.1, 0.1, 0.1, 0.1}};
  recs[1] = {true, "", 20, 3, 0.2, 0.4, {0.1, 0.1}};
  recs[2] = {false, "HTTP 503", 10, 0, 0, 0.01, {}};
  const BenchSummary s = summarize(recs, 2.0, 2, {50, 99});
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.total_input, 30);
  EXPECT_EQ(s.total_output, 8);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(s.output_throughput, 4.0);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 19.0);
  EXPECT_NEAR(s.stats[0].mean, 150, 1e-9);  // TTFT ms
  EXPECT_NEAR(s.stats[1].mean, 100, 1e-9);  // TPOT: (0.5-0.1)/4 and (0.4-0.2)/2
  EXPECT_NEAR(s.stats[2].mean, 100, 1e-9);  // ITL
  BenchSettings settings;
  settings.max_concurrency = 4;
  const std::string text = format_report(s, settings);
  EXPECT_EQ(text.substr(0, 51), "============ Serving Benchmark Result ============\n");
  for (const char* line :
       {"Successful requests:                     2         \n",
        "Failed requests:                         1         \n",
        "Maximum request concurrency:             4         \n",
        "Request throughput (req/s):              1.00      \n", "---------------Time to First Token----------------\n",
        "Mean TTFT (ms):                          150.00    \n",
        "P99 E2EL (ms):                           ", "-----Time per Output Token (excl. 1st token)------\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  const auto j = report_json(s, settings, recs);
  EXPECT_EQ(j["completed"], 2);
  EXPECT_NEAR(j["mean_ttft_ms"].get<double>(), 150, 1e-9);
  EXPECT_TRUE(j.contains("p99_itl_ms"));
  EXPECT_TRUE(j.contains("median_e2el_ms"));
  EXPECT_EQ(j["errors"][2], "HTTP 503");
}

TEST(BenchRunner, RunsAgainstAnOpenAiServer) {
  DSV4_REQUIRE_TOKENIZER();
  servertest::TestServer srv;
  const std::string url = fmt::format("http://127.0.0.1:{}", srv.port());
  const ServerModel m = discover_model(url, "");
  EXPECT_EQ(m.id, "test-model");
  EXPECT_EQ(m.vocab_size, servertest::real_tokenizer()->vocab_size());
  RandomDatasetOptions d;
  d.num_prompts = 20;
  d.input_len = 16;
  d.output_len = 5;
  d.vocab_size = m.vocab_size;
  BenchRunOptions o;
  o.settings.base_url = url;
  o.settings.model = m.id;
  o.settings.max_concurrency = 8;
  o.settings.request_rate = 200;  // Poisson arrivals
  o.progress = false;
  const BenchRun run = run_benchmark(random_dataset(d), o);
  ASSERT_EQ(run.records.size(), 20u);
  for (const auto& r : run.records) {
    EXPECT_TRUE(r.success) << r.error;
    EXPECT_EQ(r.output_tokens, 5);
    EXPECT_EQ(r.prompt_len, 16);
    EXPECT_GT(r.ttft, 0);
    EXPECT_GE(r.latency, r.ttft);
  }
  EXPECT_LE(run.peak_concurrency, 8);
  EXPECT_TRUE(srv.wait_idle());
  // A refused request is a failure with the server's message.
  o.settings.model = "wrong";
  const RequestRecord bad = send_request(url, o, random_dataset(d)[0]);
  EXPECT_FALSE(bad.success);
  EXPECT_NE(bad.error.find("HTTP 404"), std::string::npos) << bad.error;
}

// The chat endpoint gets a chat body: the server answers a completions body there with 400, so every
// request succeeding shows the messages were sent (the prompts' text comes from its /detokenize).
TEST(BenchRunner, ChatEndpointSendsMessages) {
  DSV4_REQUIRE_TOKENIZER();
  servertest::TestServer srv;
  const std::string url = fmt::format("http://127.0.0.1:{}", srv.port());
  RandomDatasetOptions d;
  d.num_prompts = 6;
  d.input_len = 12;
  d.output_len = 4;
  d.vocab_size = 20000;
  d.seed = std::random_device{}();
  auto requests = random_dataset(d);
  BenchRunOptions o;
  o.settings.base_url = url;
  o.settings.endpoint = "/v1/chat/completions";
  o.settings.model = "test-model";
  o.progress = false;
  ASSERT_TRUE(is_chat_endpoint(o.settings.endpoint));
  ASSERT_FALSE(is_chat_endpoint("/v1/completions"));
  detokenize_prompts(url, "", o.settings.model, requests);
  for (const auto& r : requests) EXPECT_FALSE(r.text.empty());
  const BenchRun run = run_benchmark(requests, o);
  for (const auto& r : run.records) {
    EXPECT_TRUE(r.success) << r.error;
    EXPECT_EQ(r.output_tokens, 4);
    EXPECT_GT(r.prompt_len, 0);  // from the server's usage: the chat template's tokens included
  }
  EXPECT_TRUE(srv.wait_idle());
}

}  // namespace
}  // namespace dsv4::bench
