#include "sched/request.h"

namespace dsv4 {

std::string_view request_status_name(RequestStatus s) {
  switch (s) {
    case RequestStatus::kWaiting:
      return "waiting";
    case RequestStatus::kRunning:
      return "running";
    case RequestStatus::kPreempted:
      return "preempted";
    case RequestStatus::kFinished:
      return "finished";
    case RequestStatus::kAborted:
      return "aborted";
  }
  return "?";
}

}  // namespace dsv4
