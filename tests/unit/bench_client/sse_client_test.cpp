// The benchmark client's SSE parser: events split anywhere on the wire, comments, CRLF lines.
#include "bench_client/sse_client.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dsv4::bench {
namespace {

TEST(SseParser, EventsCommentsAndSplits) {
  const std::string wire = "data: {\"a\":1}\n\n: ping\n\ndata: x\r\ndata: y\r\n\r\ndata: [DONE]\n\n";
  for (size_t step = 1; step <= wire.size(); ++step) {
    SseParser p;
    std::vector<SseParser::Event> all;
    for (size_t i = 0; i < wire.size(); i += step) {
      for (auto& e : p.feed(std::string_view(wire).substr(i, step))) all.push_back(e);
    }
    ASSERT_EQ(all.size(), 4u) << step;
    EXPECT_EQ(all[0].data, "{\"a\":1}");
    EXPECT_TRUE(all[1].comment);
    EXPECT_EQ(all[2].data, "x\ny");
    EXPECT_EQ(all[3].data, "[DONE]");
  }
}

}  // namespace
}  // namespace dsv4::bench
