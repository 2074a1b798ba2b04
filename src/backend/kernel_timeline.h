// What a traced step spent where on the device (Device::start_trace / stop_trace): the span from its
// first kernel's start to its last kernel's end, the part of it some kernel was running (busy), the
// rest (idle: launch latency, waits on the host or between queues), and per kernel function its calls
// and time. Unlike the op profile, whose marks serialize eager ops, this is the step as it runs
// (graph replays, the side queue beside the main one).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/device.h"

namespace dsv4 {

struct KernelTotal {
  std::string name;  // kernel_short_name
  double calls = 0;  // per step
  // Per step, summed over the calls: how much later the step's work stood done because of this kernel
  // (its end minus the latest end before it, any queue): the shares add up to the span. With launches
  // that overlap their predecessor's tail (PDL), a kernel's own span includes its wait on the one
  // before; its share does not.
  double share_us = 0;
  double us = 0;        // its own spans, start to end, summed over the calls
  uint32_t stream = 0;  // the queue of its first call (the main queue or the side one)
  // Per step: the idle time just before this kernel's calls (the device ran nothing from the end of the
  // work before to this start): where the timeline waits on a launch.
  double idle_before_us = 0;
};

struct KernelTimeline {
  int steps = 0;
  double kernels = 0;                           // per step
  double span_us = 0, busy_us = 0, sum_us = 0;  // per step; sum_us > busy_us where queues overlap
  std::vector<KernelTotal> by_time;             // the largest share first
  // Per queue (stream id ascending): the union of its kernels' spans, per step: how long each queue
  // worked, so that a side queue's share of the critical path can be read beside the main one's.
  std::vector<std::pair<uint32_t, double>> stream_busy_us;
  double idle_us() const { return span_us - busy_us; }
};

// Summarizes steps traced one at a time (each a stop_trace result); an empty step counts as no time.
KernelTimeline summarize_timeline(const std::vector<std::vector<Device::KernelSpan>>& steps);

// A kernel's symbol as a short readable name: demangled, without return type, parameters and
// namespaces, template arguments kept ("_ZN4dsv44cuda...hc_mix_fast_kernelILi1EEEvNS1_8HcLaunchEPf" ->
// "hc_mix_fast_kernel<1>").
std::string kernel_short_name(std::string_view symbol);

}  // namespace dsv4
