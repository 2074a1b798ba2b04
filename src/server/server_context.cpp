#include "server/server_context.h"

#include "server/api_error.h"

namespace dsv4::server {

void ServerContext::set_failure(std::string why) {
  std::lock_guard lock(mu_);
  failure_ = std::move(why);
}

std::string ServerContext::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void check_serving(const ServerContext& ctx) {
  switch (ctx.state()) {
    case ServerState::kReady:
      return;
    case ServerState::kLoading:
      throw unavailable("Loading model");
    case ServerState::kDraining:
      throw unavailable("The server is shutting down");
    case ServerState::kFailed:
      throw unavailable("The engine failed: " + ctx.failure());
  }
}

}  // namespace dsv4::server
