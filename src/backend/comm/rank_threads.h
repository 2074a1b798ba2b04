// Ranks as threads: how one process runs a sharded model on the host communicator (CPU backend) or
// the staged one (ranks sharing a GPU). A rank that throws aborts its communicator, so its peers fail
// at once with its reason instead of waiting out the timeout.
#pragma once

#include <functional>
#include <vector>

#include "backend/comm/communicator.h"

namespace dsv4 {

// Runs fn on one thread per communicator and waits for all; rethrows the first error a rank raised
// (the cause; the peers' errors that follow from it name it).
void run_ranks(const std::vector<Communicator*>& ranks, const std::function<void(Communicator&)>& fn);

}  // namespace dsv4
