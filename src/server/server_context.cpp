#include "server/server_context.h"

namespace dsv4::server {

void ServerContext::set_failure(std::string why) {
  std::lock_guard lock(mu_);
  failure_ = std::move(why);
}

std::string ServerContext::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

}  // namespace dsv4::server
