#include "server/sse.h"

namespace dsv4::server {

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

std::string sse_event(const Json& data) { return "data: " + dump_json(data) + "\n\n"; }

std::string named_sse_event(const Json& data) {
  const auto type = data.find("type");
  if (type == data.end() || !type->is_string()) return sse_event(data);
  return "event: " + type->get<std::string>() + "\n" + sse_event(data);
}

}  // namespace dsv4::server
