// The MoE of a sharded model (MODEL.md §6, model/parallel_layout.h). Every rank routes all of its
// replica's tokens (the gate is replicated). Experts sliced by TP rank compute their rows of each pair's
// hidden row and output, gathered between; experts owned by ranks receive the rows routed to them and
// send their outputs back. Either way each pair's output row is computed whole on one rank and
// moe_combine sums a token's rows in moe_experts' order, so the bits are one rank's.
#include <numeric>

#include "model/model.h"
#include "model/model_layer.h"
#include "model/scratch.h"
#include "model/step_index.h"

namespace dsv4 {
namespace {

// Routed rows of one expert-parallel step: the pairs of this rank's tokens in the order they are sent
// (by owning rank, then pair), and how many go to each rank.
struct Dispatch {
  std::vector<int64_t> order;  // pair index within the chunk
  std::vector<int64_t> send;   // rows to each rank
  std::vector<int32_t> ids;    // expert of each sent row
  std::vector<float> weights;  // routing weight of each sent row
};

Dispatch plan_dispatch(const std::vector<int32_t>& idx, const std::vector<float>& wts, int world, int per_rank) {
  Dispatch d;
  d.send.assign(static_cast<size_t>(world), 0);
  for (int o = 0; o < world; ++o) {
    for (size_t q = 0; q < idx.size(); ++q) {
      if (idx[q] / per_rank != o) continue;
      d.order.push_back(static_cast<int64_t>(q));
      d.ids.push_back(idx[q]);
      d.weights.push_back(wts[q]);
      ++d.send[static_cast<size_t>(o)];
    }
  }
  return d;
}

template <typename T>
DeviceArray<T> upload(Device& dev, const std::vector<T>& host) {
  auto a = scratch<T>(dev, static_cast<int64_t>(host.size()));
  if (!host.empty()) dev.to_device(a.data(), host.data(), host.size() * sizeof(T));
  return a;
}

}  // namespace

DeviceArray<uint16_t> Model::shared_expert(const Layer& L, int64_t T, const uint16_t* x, bool whole) {
  const int64_t D = cfg_.dim, I = cfg_.moe_inter_dim;
  if (L.s1.rows == I && L.s2.rows == D) {
    auto ys = scratch<uint16_t>(dev_, T * D);
    ops_.shared_expert({x, T, D, I, L.s1, L.s3, L.s2, ys.data()});
    return ys;
  }
  // This rank's rows of w1/w3 make its slice of the hidden row; gathered, they go through its w2 rows.
  const int64_t il = L.s1.rows, dl = L.s2.rows;
  auto g = scratch<uint16_t>(dev_, T * il), u = scratch<uint16_t>(dev_, T * il);
  ops_.linear({x, T, L.s1, g.data()});
  ops_.linear({x, T, L.s3, u.data()});
  ops_.swiglu({.g = g.data(), .u = u.data(), .rows = T, .dim = il, .out = g.data()});
  DeviceArray<uint16_t> hidden;
  const uint16_t* a = g.data();
  if (il < I) {
    hidden = scratch<uint16_t>(dev_, T * I);
    exchange_.gather_columns(g.data(), T, static_cast<size_t>(il) * 2, hidden.data());
    a = hidden.data();
  }
  auto part = scratch<uint16_t>(dev_, T * dl);
  ops_.linear({a, T, L.s2, part.data()});
  if (dl == D || !whole) return part;
  auto ys = scratch<uint16_t>(dev_, T * D);
  exchange_.gather_columns(part.data(), T, static_cast<size_t>(dl) * 2, ys.data());
  return ys;
}

void Model::moe_sliced(const Layer& L, const StepIndex& s, const uint16_t* x, uint16_t* out) {
  const int64_t T = s.tokens, D = cfg_.dim, I = cfg_.moe_inter_dim;
  const int k = cfg_.n_activated_experts, E = cfg_.n_routed_experts;
  const int64_t P = T * k;
  auto idx = scratch<int32_t>(dev_, P);
  auto wts = scratch<float>(dev_, P);
  gate(L, s, x, idx.data(), wts.data());
  const int64_t il = L.w1[0].rows, dl = L.w2[0].rows;
  // Where the shared w2 is split like the routed ones, its rank's columns are the ones combined here.
  const bool shared_cols = L.s2.rows == dl;
  const DeviceArray<uint16_t> ys = shared_expert(L, T, x, /*whole=*/!shared_cols);

  auto a = scratch<uint16_t>(dev_, P * il);
  ops_.moe_pairs({.stage = MoeStage::kUp,
                  .in = x,
                  .in_dim = D,
                  .tokens = T,
                  .indices = idx.data(),
                  .weights = wts.data(),
                  .topk = k,
                  .experts = E,
                  .w1 = L.w1.data(),
                  .w3 = L.w3.data(),
                  .swiglu_limit = static_cast<float>(cfg_.swiglu_limit),
                  .out = a.data(),
                  .out_dim = il});
  DeviceArray<uint16_t> hidden;
  const uint16_t* a_in = a.data();
  if (il < I) {
    hidden = scratch<uint16_t>(dev_, P * I);
    exchange_.gather_columns(a.data(), P, static_cast<size_t>(il) * 2, hidden.data());
    a_in = hidden.data();
  }
  auto pairs = scratch<uint16_t>(dev_, P * dl);
  ops_.moe_pairs({.stage = MoeStage::kDown,
                  .in = a_in,
                  .in_dim = I,
                  .tokens = T,
                  .indices = idx.data(),
                  .topk = k,
                  .experts = E,
                  .w2 = L.w2.data(),
                  .out = pairs.data(),
                  .out_dim = dl});
  if (dl == D) return ops_.moe_combine({pairs.data(), idx.data(), ys.data(), T, k, D, out});
  // The sum over this rank's columns, with its columns of the shared output; then gathered.
  const auto row = static_cast<size_t>(dl) * 2;
  DeviceArray<uint16_t> sliced;
  if (!shared_cols) {
    const int64_t c0 = shard_.layout.routed_out.range(exchange_.tp_rank()).begin;
    sliced = scratch<uint16_t>(dev_, T * dl);
    dev_.copy_2d(sliced.data(), row, ys.data() + c0, static_cast<size_t>(D) * 2, row, static_cast<size_t>(T));
  }
  auto y_cols = scratch<uint16_t>(dev_, T * dl);
  ops_.moe_combine({pairs.data(), idx.data(), shared_cols ? ys.data() : sliced.data(), T, k, dl, y_cols.data()});
  exchange_.gather_columns(y_cols.data(), T, row, out);
}

// Each TP rank of a replica sends the pairs of its share of the tokens to the ranks owning their experts,
// runs its own experts over the rows it receives, returns them, and sums its tokens; the replica's TP
// ranks then gather their tokens' rows.
void Model::moe_owned(const Layer& L, const StepIndex& s, const uint16_t* x, uint16_t* out) {
  const ParallelLayout& lay = shard_.layout;
  const int64_t T = s.tokens, D = cfg_.dim;
  const int k = cfg_.n_activated_experts, E = cfg_.n_routed_experts, tp = lay.config.tp;
  auto idx = scratch<int32_t>(dev_, T * k);
  auto wts = scratch<float>(dev_, T * k);
  gate(L, s, x, idx.data(), wts.data());
  const DeviceArray<uint16_t> ys = shared_expert(L, T, x, /*whole=*/true);

  const int64_t chunk = (T + tp - 1) / tp, t0 = std::min(T, exchange_.tp_rank() * chunk);
  const int64_t n = std::min(T, t0 + chunk) - t0;
  std::vector<int32_t> h_idx(static_cast<size_t>(n * k));
  std::vector<float> h_wts(h_idx.size());
  if (n > 0) {
    dev_.to_host(h_idx.data(), idx.data() + t0 * k, h_idx.size() * sizeof(int32_t));
    dev_.to_host(h_wts.data(), wts.data() + t0 * k, h_wts.size() * sizeof(float));
  }
  const Dispatch d = plan_dispatch(h_idx, h_wts, lay.config.world(), E / lay.ep_size);
  const auto sent = static_cast<int64_t>(d.order.size());
  DSV4_CHECK(sent == n * k, "moe: {} of {} pairs dispatched", sent, n * k);  // every pair once
  const size_t row = static_cast<size_t>(D) * 2;
  // One upload: the sent rows' experts, the token row each reads, and each pair's place among them.
  std::vector<int32_t> lists(d.ids);
  lists.resize(static_cast<size_t>(3 * sent));
  for (int64_t i = 0; i < sent; ++i) {
    const int64_t q = d.order[static_cast<size_t>(i)];
    lists[static_cast<size_t>(sent + i)] = static_cast<int32_t>(t0 + q / k);
    lists[static_cast<size_t>(2 * sent + q)] = static_cast<int32_t>(i);
  }
  const auto on_dev = upload(dev_, lists);
  const auto ws = upload(dev_, d.weights);
  auto xs = scratch<uint16_t>(dev_, sent * D);
  ops_.gather_rows({x, T, on_dev.data() + sent, sent, static_cast<int64_t>(row), xs.data()});

  const DeviceArray<uint16_t> back = exchange_experts(L, d.send, xs.data(), on_dev.data(), ws.data());

  // This rank's tokens: their pairs in pair order, summed as moe_experts sums them.
  auto pairs = scratch<uint16_t>(dev_, n * k * D);
  ops_.gather_rows({back.data(), sent, on_dev.data() + 2 * sent, n * k, static_cast<int64_t>(row), pairs.data()});
  auto mine = scratch<uint16_t>(dev_, chunk * D);
  ops_.moe_combine({pairs.data(), idx.data() + t0 * k, ys.data() + t0 * D, n, k, D, mine.data()});
  if (tp == 1) return dev_.copy(out, mine.data(), static_cast<size_t>(T) * row);
  auto all = scratch<uint16_t>(dev_, tp * chunk * D);
  exchange_.gather_rows(mine.data(), chunk, row, all.data());
  dev_.copy(out, all.data(), static_cast<size_t>(T) * row);
}

DeviceArray<uint16_t> Model::exchange_experts(const Layer& L, std::span<const int64_t> send, const uint16_t* xs,
                                              const int32_t* ids, const float* wts) {
  const int64_t D = cfg_.dim, I = cfg_.moe_inter_dim;
  const int E = cfg_.n_routed_experts;
  const std::vector<int64_t> recv = exchange_.exchange_counts(send);
  const int64_t m = std::accumulate(recv.begin(), recv.end(), int64_t{0});
  const int64_t sent = std::accumulate(send.begin(), send.end(), int64_t{0});
  const size_t row = static_cast<size_t>(D) * 2;
  auto xr = scratch<uint16_t>(dev_, m * D);
  auto idr = scratch<int32_t>(dev_, m);
  auto wr = scratch<float>(dev_, m);
  exchange_.exchange_rows(xs, send, recv, row, xr.data());
  exchange_.exchange_rows(ids, send, recv, sizeof(int32_t), idr.data());
  exchange_.exchange_rows(wts, send, recv, sizeof(float), wr.data());

  // This rank's experts over the rows sent here, one pair a row.
  auto a = scratch<uint16_t>(dev_, m * I), yr = scratch<uint16_t>(dev_, m * D);
  ops_.moe_pairs({.stage = MoeStage::kUp,
                  .in = xr.data(),
                  .in_dim = D,
                  .tokens = m,
                  .indices = idr.data(),
                  .weights = wr.data(),
                  .topk = 1,
                  .experts = E,
                  .w1 = L.w1.data(),
                  .w3 = L.w3.data(),
                  .swiglu_limit = static_cast<float>(cfg_.swiglu_limit),
                  .out = a.data(),
                  .out_dim = I});
  ops_.moe_pairs({.stage = MoeStage::kDown,
                  .in = a.data(),
                  .in_dim = I,
                  .tokens = m,
                  .indices = idr.data(),
                  .topk = 1,
                  .experts = E,
                  .w2 = L.w2.data(),
                  .out = yr.data(),
                  .out_dim = D});
  auto back = scratch<uint16_t>(dev_, sent * D);
  exchange_.exchange_rows(yr.data(), recv, send, row, back.data());
  return back;
}

void Model::idle_step() {
  if (shard_.layout.ep_size == 1) return;  // nothing of this rank's meets other replicas
  const std::vector<int64_t> none(static_cast<size_t>(shard_.layout.config.world()), 0);
  for (const Layer& L : layers_) exchange_experts(L, none, nullptr, nullptr, nullptr);
  dev_.synchronize();
}

}  // namespace dsv4
