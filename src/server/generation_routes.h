// POST /v1/completions and POST /v1/chat/completions: parse, tokenize, submit (GenerationJob), then
// answer in one response or as an SSE stream.
//
// A non-streaming request whose client disconnects is noticed by the connection probe within ~100 ms:
// its engine requests are aborted and their KV blocks freed, as for streams (docs/server.md).
#pragma once

#include <httplib.h>

#include "server/server_context.h"

namespace dsv4::server {

void add_generation_routes(httplib::Server& svr, ServerContext& ctx);

}  // namespace dsv4::server
