// The endpoints around generation: GET /health (200 when serving; 503 while loading, draining or after an
// engine failure), GET /v1/models, GET /version, POST /tokenize and /detokenize (vLLM's shapes),
// GET /metrics (Prometheus text).
#pragma once

#include <httplib.h>

#include "server/routed_server.h"
#include "server/server_context.h"

namespace dsv4::server {

void add_info_routes(RoutedServer& svr, ServerContext& ctx);

}  // namespace dsv4::server
