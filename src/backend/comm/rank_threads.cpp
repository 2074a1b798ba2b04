#include "backend/comm/rank_threads.h"

#include <exception>
#include <mutex>
#include <string>
#include <thread>

namespace dsv4 {

namespace {

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an unknown exception";
  }
}

}  // namespace

void run_ranks(const std::vector<Communicator*>& ranks, const std::function<void(Communicator&)>& fn) {
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(ranks.size());
  for (Communicator* c : ranks) {
    threads.emplace_back([&, c] {
      try {
        fn(*c);
      } catch (...) {
        const std::exception_ptr e = std::current_exception();
        {
          std::lock_guard lock(mu);
          if (!first) first = e;
        }
        c->abort(message_of(e));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace dsv4
