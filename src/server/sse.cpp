#include "server/sse.h"

namespace dsv4::server {

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

std::string sse_event(const Json& data) { return "data: " + dump_json(data) + "\n\n"; }

}  // namespace dsv4::server
