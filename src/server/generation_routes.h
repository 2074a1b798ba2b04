// POST /v1/completions and POST /v1/chat/completions: parse, tokenize, submit (GenerationJob), then
// answer in one response or as an SSE stream.
//
// When the client disconnects (streaming or not), its engine requests are aborted at once from the request
// reader's thread (connection_probe.h) and their KV blocks freed at the engine's next step (docs/server.md).
#pragma once

#include <httplib.h>

#include "server/routed_server.h"
#include "server/server_context.h"

namespace dsv4::server {

void add_generation_routes(RoutedServer& svr, ServerContext& ctx);

}  // namespace dsv4::server
