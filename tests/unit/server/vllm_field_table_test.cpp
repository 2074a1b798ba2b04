// Every request field of vLLM's OpenAI server (tests/data/server/vllm_request_fields.json) against both
// endpoints of a running server: each accepted value answers 200, each refused one 400 naming the field,
// and a value of the wrong type 400 naming it too (a field the server never reads would take it). The
// table's statuses are docs/server.md's: each field is listed in the compatibility table of its status.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "server_test_support.h"
#include "testing/paths.h"

namespace dsv4::server {
namespace {

using servertest::TestServer;

Json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return Json::parse(in);
}

const Json& field_table() {
  static const Json t = read_json(testing::data_dir() / "server/vllm_request_fields.json");
  return t;
}

Json base_body(const std::string& endpoint) {
  if (endpoint == "chat") return Json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}};
  return Json{{"prompt", "Hi"}, {"max_tokens", 2}};
}

std::string path_of(const std::string& endpoint) {
  return endpoint == "chat" ? "/v1/chat/completions" : "/v1/completions";
}

struct Answer {
  int status = 0;
  std::string param;  // the error's
  std::string body;
};

Answer send(TestServer& s, const std::string& endpoint, const Json& entry, const Json& value) {
  Json body = base_body(endpoint);
  if (entry.contains("with")) body.update(entry["with"]);
  body[entry["field"].get<std::string>()] = value;
  auto r = s.client().Post(path_of(endpoint), body.dump(), "application/json");
  if (!r) return {};
  Answer a{r->status, "", r->body};
  const Json j = Json::parse(r->body, nullptr, false);
  if (j.is_object() && j.contains("error")) a.param = j["error"].value("param", "");
  return a;
}

class VllmFieldTable : public ::testing::Test {
 protected:
  void SetUp() override { DSV4_REQUIRE_TOKENIZER(); }
};

TEST_F(VllmFieldTable, EveryFieldIsHonouredOrRefusedByName) {
  TestServer s;
  int requests = 0;
  for (const Json& e : field_table()["fields"]) {
    const std::string field = e["field"], status = e["status"];
    ASSERT_TRUE(status == "supported" || status == "no_effect" || status == "refused") << field;
    EXPECT_TRUE(status != "refused" || e.contains("refused")) << field << ": a refused field without a refused value";
    for (const std::string endpoint : e["endpoints"]) {
      SCOPED_TRACE(field + " on " + endpoint);
      for (const Json& v : e.value("ok", Json::array())) {
        const Answer a = send(s, endpoint, e, v);
        EXPECT_EQ(a.status, 200) << v.dump() << ": " << a.body;
        ++requests;
      }
      for (const Json& v : e.value("refused", Json::array())) {
        const Answer a = send(s, endpoint, e, v);
        EXPECT_EQ(a.status, 400) << v.dump() << ": " << a.body;
        EXPECT_EQ(a.param, field) << v.dump() << ": " << a.body;
        ++requests;
      }
      if (e.contains("wrong")) {
        const Answer a = send(s, endpoint, e, e["wrong"]);
        EXPECT_EQ(a.status, 400) << "wrong type " << e["wrong"].dump() << ": " << a.body;
        EXPECT_EQ(a.param, field) << "wrong type " << e["wrong"].dump() << ": " << a.body;
        ++requests;
      }
    }
  }
  EXPECT_GT(requests, 300);
  EXPECT_TRUE(s.wait_idle());
}

// docs/server.md marks its compatibility tables with <!-- fields: STATUS -->; the first cell of each row
// names fields in backquotes.
std::map<std::string, std::set<std::string>> documented_fields() {
  std::ifstream in(testing::data_dir() / "../../docs/server.md");
  EXPECT_TRUE(in.good());
  std::map<std::string, std::set<std::string>> out;
  std::string status, line;
  while (std::getline(in, line)) {
    const std::string marker = "<!-- fields: ";
    if (line.rfind(marker, 0) == 0) {
      status = line.substr(marker.size(), line.find(' ', marker.size()) - marker.size());
      continue;
    }
    if (line.empty() || line[0] != '|') {
      if (!line.empty() && line[0] == '#') status.clear();
      continue;
    }
    const std::string cell = line.substr(1, line.find('|', 1) - 1);
    for (size_t a = cell.find('`'); a != std::string::npos && !status.empty(); a = cell.find('`', a + 1)) {
      const size_t b = cell.find('`', a + 1);
      if (b == std::string::npos) break;
      out[status].insert(cell.substr(a + 1, b - a - 1));
      a = b;
    }
  }
  return out;
}

TEST(VllmFieldTableDocs, DocsListEveryFieldUnderItsStatus) {
  const auto docs = documented_fields();
  ASSERT_EQ(docs.size(), 3u) << "docs/server.md needs the supported, no_effect and refused tables";
  std::map<std::string, std::set<std::string>> table;
  for (const Json& e : field_table()["fields"]) table[e["status"]].insert(e["field"].get<std::string>());
  for (const auto& [status, fields] : table) {
    for (const std::string& f : fields) {
      EXPECT_TRUE(docs.count(status) && docs.at(status).count(f))
          << "`" << f << "` is not in the " << status << " table";
    }
  }
  for (const auto& [status, fields] : docs) {
    for (const std::string& f : fields) {
      EXPECT_TRUE(table[status].count(f))
          << "docs/server.md lists `" << f << "` as " << status << ", the table does not";
    }
  }
}

}  // namespace
}  // namespace dsv4::server
