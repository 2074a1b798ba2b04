#include "backend/kernel_timeline.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>

namespace dsv4 {
namespace {

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Drops every "qualifier::" (identifiers and "(anonymous namespace)") before a name.
std::string drop_qualifiers(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 2, "::") == 0) {  // the qualifier just written ends here: take it back
      while (!out.empty() && (ident_char(out.back()))) out.pop_back();
      if (!out.empty() && out.back() == ')' && out.size() >= 21 &&
          out.compare(out.size() - 21, 21, "(anonymous namespace)") == 0)
        out.resize(out.size() - 21);
      i += 2;
      continue;
    }
    out += s[i++];
  }
  return out;
}

std::string demangle(std::string_view symbol) {
  const std::string s(symbol);
  if (!s.starts_with("_Z")) return s;  // "a", "b", ... alone would demangle as type names
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(s.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : s;
}

// The union of spans added in start order: its length so far, and how far it reaches.
struct Coverage {
  uint64_t busy = 0, to = 0;
  bool any = false;
  // The gap before a span starting at `start` (0 for the first), then the span added.
  uint64_t add(uint64_t start, uint64_t end) {
    if (!any) to = start, any = true;
    const uint64_t gap = start > to ? start - to : 0;
    if (end > to) busy += end - std::max(to, start);
    to = std::max(to, end);
    return gap;
  }
};

}  // namespace

std::string kernel_short_name(std::string_view symbol) {
  const std::string full = demangle(symbol);
  // The name ends at the parameter list: the first '(' outside template arguments, not "(anonymous".
  size_t end = full.size();
  int depth = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    const char c = full[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (c == '(' && depth == 0 && full.compare(i, 10, "(anonymous") != 0) {
      end = i;
      break;
    }
  }
  std::string_view head(full.data(), end);
  // A return type before the name ("void f<...>"): the last space outside template arguments.
  depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < head.size(); ++i) {
    if (head[i] == '<') ++depth;
    if (head[i] == '>') --depth;
    if (head[i] == ' ' && depth == 0 && head.compare(i + 1, 10, "namespace)") != 0) start = i + 1;
  }
  return drop_qualifiers(head.substr(start));
}

KernelTimeline summarize_timeline(const std::vector<std::vector<Device::KernelSpan>>& steps) {
  KernelTimeline t;
  t.steps = static_cast<int>(steps.size());
  std::map<std::string, KernelTotal> totals;
  std::map<std::string, std::string> short_names;  // symbol -> short name, each demangled once
  std::map<uint32_t, double> streams;              // stream -> busy us, summed over steps
  for (const std::vector<Device::KernelSpan>& step : steps) {
    std::vector<const Device::KernelSpan*> by_start;
    for (const Device::KernelSpan& s : step) by_start.push_back(&s);
    // Ties in the order the device reported them: a gap goes to the same kernel every time.
    std::stable_sort(by_start.begin(), by_start.end(), [](auto* a, auto* b) { return a->start_ns < b->start_ns; });
    // Busy time: the union of the spans, all queues' and each queue's own.
    Coverage all;
    std::map<uint32_t, Coverage> queue;
    const uint64_t first = by_start.empty() ? 0 : by_start.front()->start_ns;
    uint64_t last = first;
    for (const Device::KernelSpan* s : by_start) {
      const uint64_t end = std::max(s->end_ns, s->start_ns);
      auto [at, fresh] = short_names.try_emplace(s->name);
      if (fresh) at->second = kernel_short_name(s->name);
      KernelTotal& k = totals[at->second];
      if (k.calls == 0) k.stream = s->stream;
      k.calls += 1;
      k.us += static_cast<double>(end - s->start_ns) / 1e3;
      k.idle_before_us += static_cast<double>(all.add(s->start_ns, end)) / 1e3;
      queue[s->stream].add(s->start_ns, end);
      last = std::max(last, end);
      t.sum_us += static_cast<double>(end - s->start_ns) / 1e3;
    }
    // Shares: spans in end order, each the time from the latest end before it (or the first start) to its own.
    std::vector<const Device::KernelSpan*> by_end = by_start;
    std::stable_sort(by_end.begin(), by_end.end(), [](auto* a, auto* b) { return a->end_ns < b->end_ns; });
    uint64_t done_to = first;
    for (const Device::KernelSpan* s : by_end) {
      const uint64_t end = std::max(s->end_ns, s->start_ns);
      if (end > done_to) totals[short_names[s->name]].share_us += static_cast<double>(end - done_to) / 1e3;
      done_to = std::max(done_to, end);
    }
    for (const auto& [stream, q] : queue) streams[stream] += static_cast<double>(q.busy) / 1e3;
    t.kernels += static_cast<double>(step.size());
    t.span_us += static_cast<double>(last - first) / 1e3;
    t.busy_us += static_cast<double>(all.busy) / 1e3;
  }
  const double n = std::max(1, t.steps);
  t.kernels /= n, t.span_us /= n, t.busy_us /= n, t.sum_us /= n;
  for (const auto& [stream, us] : streams) t.stream_busy_us.emplace_back(stream, us / n);
  for (auto& [name, k] : totals) {
    k.name = name;
    k.calls /= n, k.us /= n, k.share_us /= n, k.idle_before_us /= n;
    t.by_time.push_back(k);
  }
  std::sort(t.by_time.begin(), t.by_time.end(), [](const KernelTotal& a, const KernelTotal& b) {
    return a.share_us != b.share_us ? a.share_us > b.share_us : a.name < b.name;
  });
  return t;
}

}  // namespace dsv4
