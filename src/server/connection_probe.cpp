#include "server/connection_probe.h"

namespace dsv4::server {
namespace {

thread_local std::shared_ptr<PeerWatch> current_watch;

}  // namespace

void PeerWatch::on_close(std::function<void()> hook) {
  std::lock_guard lock(mu_);
  if (detached_) return;
  if (closed_) {
    hook();
    return;
  }
  hooks_.push_back(std::move(hook));
}

void PeerWatch::mark_closed() {
  std::lock_guard lock(mu_);
  if (closed_.exchange(true)) return;
  for (auto& hook : hooks_) hook();
  hooks_.clear();
}

void PeerWatch::detach() {
  std::lock_guard lock(mu_);
  detached_ = true;
  hooks_.clear();
}

ConnectionProbe ConnectionProbe::current() { return ConnectionProbe(current_watch); }

void ConnectionProbe::on_close(std::function<void()> hook) const {
  if (watch_) watch_->on_close(std::move(hook));
}

ProbeScope::ProbeScope(std::shared_ptr<PeerWatch> watch) : previous_(std::move(current_watch)) {
  current_watch = std::move(watch);
}

ProbeScope::~ProbeScope() { current_watch = std::move(previous_); }

}  // namespace dsv4::server
