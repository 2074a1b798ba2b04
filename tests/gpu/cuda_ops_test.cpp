// The op-level parity suite: every Ops operation of CudaOps against CpuOps on fresh random inputs, at
// golden-set and V4-Flash shapes, through the Ops interface (parameter plumbing included). Continuous
// outputs are judged by normalised error, discrete ones (top-k, routing, quantized entries) must be
// identical; device outputs are poisoned (0xFF = NaN) before every run, and every CUDA op runs twice
// and must give the same bits.
#include "backend/cuda/cuda_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/gemm.h"
#include "backend/rope.h"
#include "core/number_formats.h"
#include "gpu/gpu_test_util.h"
#include "unit/backend_cpu/op_test_util.h"

namespace dsv4 {
namespace {

using gputest::normalized_error;
using testing::Fp4Weight;
using testing::Fp8Weight;
using testing::OwnedTable;
using testing::random_bf16;
using testing::random_f32;

// Device twins of host buffers. Params are built twice from one lambda: with Host{} (identity) for
// the CPU backend and with Dev{&mirror} (host pointer -> its twin) for the CUDA backend.
class Mirror {
 public:
  explicit Mirror(cuda::CudaDevice& dev) : dev_(dev) {}
  ~Mirror() {
    for (auto& [h, d] : twins_) dev_.release(d.ptr);
  }

  template <typename T>
  T* add(std::vector<T>& v) {
    const size_t bytes = std::max<size_t>(v.size() * sizeof(T), 1);
    void* d = dev_.allocate(bytes);
    dev_.to_device(d, v.data(), v.size() * sizeof(T));
    twins_[v.data()] = {d, bytes};
    return v.data();
  }
  // Re-uploads (after the CPU changed a shared buffer) or poisons the twin.
  template <typename T>
  void upload(const std::vector<T>& v) {
    dev_.to_device(twin(v.data()), v.data(), v.size() * sizeof(T));
  }
  template <typename T>
  void poison(const std::vector<T>& v) {
    cudaMemsetAsync(twin(v.data()), 0xFF, v.size() * sizeof(T), dev_.stream());
  }
  template <typename T>
  std::vector<T> fetch(const std::vector<T>& v) {
    std::vector<T> out(v.size());
    dev_.to_host(out.data(), twin(v.data()), v.size() * sizeof(T));
    return out;
  }
  void* twin(const void* host) const {
    const auto it = twins_.find(host);
    if (it == twins_.end()) throw std::runtime_error("mirror: unregistered host buffer");
    return it->second.ptr;
  }

 private:
  struct Twin {
    void* ptr;
    size_t bytes;
  };
  cuda::CudaDevice& dev_;
  std::map<const void*, Twin> twins_;
};

struct Host {
  template <typename T>
  T* operator()(T* p) const {
    return p;
  }
  Weight operator()(Weight w) const { return w; }
  EntryTable operator()(EntryTable t) const { return t; }
};

struct Dev {
  Mirror* m;
  template <typename T>
  T* operator()(T* p) const {
    return p ? static_cast<T*>(m->twin(p)) : nullptr;
  }
  Weight operator()(Weight w) const {
    w.data = (*this)(w.data);
    w.scale = (*this)(w.scale);
    return w;
  }
  EntryTable operator()(EntryTable t) const {
    t.base = (*this)(t.base);
    return t;
  }
};

class CudaOpsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dev_ = new cuda::CudaDevice(0);
    ops_ = new cuda::CudaOps(*dev_, cuda::GemmPolicy{Numerics::kExact});
    lt_ops_ = new cuda::CudaOps(*dev_, cuda::GemmPolicy{Numerics::kFast});
  }
  static void TearDownTestSuite() {
    delete lt_ops_;
    delete ops_;
    delete dev_;
  }

  // Runs `op` on the CUDA backend twice with `out` poisoned each time; returns the first result and
  // checks that the second has the same bits.
  template <typename T, typename F>
  std::vector<T> run_twice(Mirror& m, const std::vector<T>& out, F&& op) {
    m.poison(out);
    op();
    const auto first = m.fetch(out);
    m.poison(out);
    op();
    EXPECT_EQ(m.fetch(out), first) << "not bit-reproducible run to run";
    return first;
  }

  static cuda::CudaDevice* dev_;
  static cuda::CudaOps* ops_;     // the exact tier
  static cuda::CudaOps* lt_ops_;  // the fast tier
  CpuOps cpu_{2};
};

cuda::CudaDevice* CudaOpsTest::dev_ = nullptr;
cuda::CudaOps* CudaOpsTest::ops_ = nullptr;
cuda::CudaOps* CudaOpsTest::lt_ops_ = nullptr;

// ---- linear --------------------------------------------------------------------------------------

struct LinearCase {
  const char* what;
  int64_t rows, n, k;
  WeightType type;
  ActType out;
  int groups;
  double tol;
};

TEST_F(CudaOpsTest, LinearMatchesCpu) {
  const LinearCase cases[] = {
      {"tiny fp8 wq_a", 5, 128, 256, WeightType::kFp8Block, ActType::kBF16, 1, 4e-3},
      {"tiny fp4 expert", 3, 128, 256, WeightType::kFp4Block, ActType::kBF16, 1, 4e-3},
      {"tiny bf16 fp32-out head", 4, 1024, 256, WeightType::kBf16, ActType::kF32, 1, 1e-6},
      {"tiny grouped wo_a", 6, 256, 256, WeightType::kBf16, ActType::kBF16, 2, 4e-3},
      {"flash wq_a decode", 1, 1024, 4096, WeightType::kFp8Block, ActType::kBF16, 1, 4e-3},
      {"flash wq_a batch", 32, 1024, 4096, WeightType::kFp8Block, ActType::kBF16, 1, 4e-3},
      {"flash wkv prefill", 300, 512, 4096, WeightType::kFp8Block, ActType::kBF16, 1, 4e-3},
      {"flash wo_b", 8, 4096, 8192, WeightType::kFp8Block, ActType::kBF16, 1, 4e-3},
      {"flash expert w1 fp4", 16, 2048, 4096, WeightType::kFp4Block, ActType::kBF16, 1, 4e-3},
      {"flash gate fp32", 7, 256, 4096, WeightType::kBf16, ActType::kF32, 1, 1e-5},  // fp32 sum order
      {"flash wo_a grouped", 4, 8192, 32768, WeightType::kBf16, ActType::kBF16, 8, 4e-3},
  };
  std::mt19937 rng(101);
  for (const LinearCase& c : cases) {
    SCOPED_TRACE(c.what);
    Mirror m(*dev_);
    auto x = random_bf16(static_cast<size_t>(c.rows * c.k), rng, 1.0f);
    for (int64_t r = 0; r < c.rows; ++r)  // rows of different magnitudes: per-row scales matter
      for (int64_t i = 0; i < c.k; ++i) x[r * c.k + i] = float_to_bf16(bf16_to_float(x[r * c.k + i]) * (1 + r % 5));
    const int64_t kg = c.k / c.groups;
    std::unique_ptr<Fp8Weight> w8;
    std::unique_ptr<Fp4Weight> w4;
    std::vector<uint16_t> wb;
    Weight w;
    if (c.type == WeightType::kFp8Block) {
      w8 = std::make_unique<Fp8Weight>(c.n, kg, rng);
      w = w8->view();
      m.add(w8->data);
      m.add(w8->scale);
    } else if (c.type == WeightType::kFp4Block) {
      w4 = std::make_unique<Fp4Weight>(c.n, kg, rng);
      w = w4->view();
      m.add(w4->data);
      m.add(w4->scale);
    } else {
      wb = random_bf16(static_cast<size_t>(c.n * kg), rng, 0.05f);
      w = Weight::bf16(m.add(wb), c.n, kg);
    }
    m.add(x);
    const size_t ny = static_cast<size_t>(c.rows * c.n);
    std::vector<uint16_t> yb(c.out == ActType::kBF16 ? ny : 0);
    std::vector<float> yf(c.out == ActType::kF32 ? ny : 0);
    m.add(yb);
    m.add(yf);
    auto params = [&](auto P) {
      LinearParams p{P(x.data()), c.rows, P(w), nullptr, c.out};
      p.y = c.out == ActType::kBF16 ? static_cast<void*>(P(yb.data())) : static_cast<void*>(P(yf.data()));
      p.groups = c.groups;
      return p;
    };
    cpu_.linear(params(Host{}));
    // The exact tier is bit-identical to the CPU; the fast tier within tol.
    if (c.out == ActType::kBF16) {
      EXPECT_EQ(run_twice(m, yb, [&] { ops_->linear(params(Dev{&m})); }), yb) << "exact GEMM differs from the CPU";
      const auto lt = run_twice(m, yb, [&] { lt_ops_->linear(params(Dev{&m})); });
      const double e = normalized_error(lt, yb);
      EXPECT_LE(e, c.tol) << "fast tier: normalised error " << e;
    } else {
      EXPECT_EQ(run_twice(m, yf, [&] { ops_->linear(params(Dev{&m})); }), yf) << "exact GEMM differs from the CPU";
      const auto lt = run_twice(m, yf, [&] { lt_ops_->linear(params(Dev{&m})); });
      const double e = normalized_error(lt, yf);
      EXPECT_LE(e, c.tol) << "fast tier: normalised error " << e;
    }
  }
}

// ---- row ops -------------------------------------------------------------------------------------

TEST_F(CudaOpsTest, RowOpsMatchCpu) {
  std::mt19937 rng(102);
  for (const int64_t dim : {256, 4096}) {
    for (const int64_t rows : {1, 37}) {
      SCOPED_TRACE(dim * 1000 + rows);
      Mirror m(*dev_);
      auto x = random_bf16(static_cast<size_t>(rows * dim), rng, 2.0f);
      auto w = random_bf16(static_cast<size_t>(dim), rng, 1.0f);
      std::vector<uint16_t> y(x.size());
      m.add(x);
      m.add(w);
      m.add(y);
      auto norm = [&](auto P) { return RmsNormParams{P(x.data()), P(y.data()), P(w.data()), rows, dim, 1e-6f}; };
      cpu_.rms_norm(norm(Host{}));
      EXPECT_EQ(run_twice(m, y, [&] { ops_->rms_norm(norm(Dev{&m})); }), y);

      // In-place ops: each starts from x again on both sides.
      const int heads = static_cast<int>(dim / 128);
      std::vector<int32_t> pos(static_cast<size_t>(rows));
      for (auto& p : pos) p = static_cast<int32_t>(rng() % (1 << 20));
      m.add(pos);
      const ModelConfig flash = v4_flash_config();
      struct InPlace {
        const char* what;
        std::function<void(Ops&, uint16_t*, const int32_t*)> run;
      };
      const InPlace ops[] = {
          {"head_rms_norm",
           [&](Ops& o, uint16_t* p, const int32_t*) {
             o.head_rms_norm({p, rows, heads, 128, 1e-6f});
           }},
          {"rope yarn",
           [&](Ops& o, uint16_t* p, const int32_t* q) {
             o.rope({p, rows, heads, 128, q, rope_config(flash, 4), false});
           }},
          {"rope inverse",
           [&](Ops& o, uint16_t* p, const int32_t* q) {
             o.rope({p, rows, heads, 128, q, rope_config(flash, 0), true});
           }},
          {"hadamard",
           [&](Ops& o, uint16_t* p, const int32_t*) {
             o.hadamard({p, rows * heads, 128});
           }},
          {"q8 sim",
           [&](Ops& o, uint16_t* p, const int32_t*) {
             o.quant_sim({p, rows, dim - 64, dim, QuantSim::kFp8, 64});
           }},
          {"q4 sim",
           [&](Ops& o, uint16_t* p, const int32_t*) {
             o.quant_sim({p, rows, dim, dim, QuantSim::kFp4, 32});
           }},
      };
      for (const InPlace& op : ops) {
        SCOPED_TRACE(op.what);
        std::vector<uint16_t> want = x;
        op.run(cpu_, want.data(), pos.data());
        std::vector<uint16_t> work = x;
        m.add(work);
        const auto got = run_twice(m, work, [&] {
          m.upload(work);
          op.run(*ops_, static_cast<uint16_t*>(m.twin(work.data())), static_cast<int32_t*>(m.twin(pos.data())));
        });
        EXPECT_EQ(got, want);  // each of these kernels reproduces the CPU's arithmetic
      }
    }
  }
}

// ---- attention -----------------------------------------------------------------------------------

struct AttentionCase {
  int heads, d, r, window, compressed;
  int64_t tokens, entries;
};

TEST_F(CudaOpsTest, StoreAndSparseAttentionMatchCpu) {
  const AttentionCase cases[] = {{4, 128, 64, 128, 8, 5, 300}, {64, 512, 64, 128, 512, 3, 900}};
  std::mt19937 rng(103);
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE(c.heads);
    Mirror m(*dev_);
    const KvEntryDims dims{c.d, c.r};
    OwnedTable table(c.entries, KvEntryFormat::kAttnFp8, dims, 64);
    auto vals = random_bf16(static_cast<size_t>(c.entries * c.d), rng, 2.0f);
    cpu_.quant_sim({vals.data(), c.entries, c.d - c.r, c.d, QuantSim::kFp8, 64});
    std::vector<int32_t> slots(static_cast<size_t>(c.entries));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    m.add(vals);
    m.add(slots);
    m.add(table.bytes);
    auto store = [&](auto P) {
      return StoreEntriesParams{P(vals.data()), c.entries, dims, P(table.table), P(slots.data())};
    };
    cpu_.store_entries(store(Host{}));
    ops_->store_entries(store(Dev{&m}));
    EXPECT_EQ(m.fetch(table.bytes), table.bytes) << "stored entry bytes differ";

    auto q = random_bf16(static_cast<size_t>(c.tokens * c.heads * c.d), rng, 1.0f);
    auto sink = random_f32(static_cast<size_t>(c.heads), rng, 1.0f);
    std::vector<int32_t> win(static_cast<size_t>(c.tokens * c.window)),
        cmp(static_cast<size_t>(c.tokens * c.compressed));
    for (auto& s : win) s = rng() % 7 == 0 ? -1 : static_cast<int32_t>(rng() % c.entries);
    for (auto& s : cmp) s = rng() % 5 == 0 ? -1 : static_cast<int32_t>(rng() % c.entries);
    std::vector<uint16_t> out(q.size());
    std::vector<int32_t> pos(static_cast<size_t>(c.tokens));
    for (auto& p : pos) p = static_cast<int32_t>(rng() % (1 << 20));
    for (auto* v : {&q, &out}) m.add(*v);
    m.add(sink);
    m.add(win);
    m.add(cmp);
    m.add(pos);
    const RopeConfig rope = rope_config(v4_flash_config(), 4);
    auto attn = [&](auto P) {
      SparseAttentionParams p;
      p.q = P(q.data());
      p.out = P(out.data());
      p.tokens = c.tokens;
      p.heads = c.heads;
      p.head_dim = c.d;
      p.rope_dim = c.r;
      p.sink = P(sink.data());
      p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(c.d));
      p.window = P(table.table);
      p.window_slots = P(win.data());
      p.window_width = c.window;
      p.compressed = P(table.table);
      p.compressed_slots = P(cmp.data());
      p.compressed_width = c.compressed;
      p.positions = P(pos.data());  // with the fused inverse RoPE of the output
      p.rope = rope;
      return p;
    };
    cpu_.sparse_attention(attn(Host{}));
    const auto got = run_twice(m, out, [&] { ops_->sparse_attention(attn(Dev{&m})); });
    if (c.heads % 16 == 0) {  // the V4 fast path (cuda::mqa_fast_path): within tolerance
      EXPECT_LE(normalized_error(got, out), 1e-2);
    } else {  // the generic kernel: bit for bit
      EXPECT_EQ(got, out);
    }
  }
}

// The fused window insert against the CPU's four steps: decoded entries within bf16 noise (the norm's
// sum order differs, so a Q8 code may move by one), rows with slot -1 untouched; and the fused Q-norm +
// RoPE against the CPU.
TEST_F(CudaOpsTest, FusedKvInsertAndQueryNormMatchCpu) {
  std::mt19937 rng(109);
  const ModelConfig flash = v4_flash_config();
  for (const KvEntryFormat f : {KvEntryFormat::kAttnFp8, KvEntryFormat::kBf16}) {
    for (const int d : {128, 512}) {
      SCOPED_TRACE(d);
      Mirror m(*dev_);
      const int64_t rows = 37;
      const KvEntryDims dims{d, 64};
      auto x = random_bf16(static_cast<size_t>(rows * d), rng, 2.0f);
      auto w = random_bf16(static_cast<size_t>(d), rng, 0.3f);
      std::vector<int32_t> pos(static_cast<size_t>(rows)), slots(static_cast<size_t>(rows));
      for (auto& p : pos) p = static_cast<int32_t>(rng() % (1 << 20));
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), rng);
      slots[5] = -1;
      OwnedTable table(rows + 3, f, dims, 8);
      for (auto* v : {&x, &w}) m.add(*v);
      m.add(pos);
      m.add(slots);
      m.add(table.bytes);
      const RopeConfig rope = rope_config(flash, 128);
      auto params = [&](auto P) {
        return KvInsertParams{P(x.data()),   rows, dims,           P(w.data()),    1e-6f,
                              P(pos.data()), rope, P(table.table), P(slots.data())};
      };
      cpu_.kv_insert(params(Host{}));
      ops_->kv_insert(params(Dev{&m}));
      const auto got = m.fetch(table.bytes);
      EXPECT_TRUE(got == table.bytes) << "kv_insert entries differ from the CPU's (format " << static_cast<int>(f)
                                      << ")";
      const size_t unused = static_cast<size_t>(table.table.entry(rows) - table.bytes.data());
      EXPECT_EQ(got[unused], 0xAB) << "an entry no slot names was written";

      auto q = random_bf16(static_cast<size_t>(rows * 4 * d), rng, 3.0f);
      m.add(q);
      auto want = q;
      cpu_.head_rms_norm({want.data(), rows, 4, d, 1e-6f, pos.data(), rope});
      const auto got_q = run_twice(m, q, [&] {
        m.upload(q);
        ops_->head_rms_norm({static_cast<uint16_t*>(m.twin(q.data())), rows, 4, d, 1e-6f,
                             static_cast<int32_t*>(m.twin(pos.data())), rope});
      });
      EXPECT_EQ(got_q, want) << "fused query norm + RoPE differs from the CPU";
    }
  }
}

TEST_F(CudaOpsTest, BadSlotIsReportedAtTheNextCopyBack) {
  Mirror m(*dev_);
  const KvEntryDims dims{128, 64};
  OwnedTable table(8, KvEntryFormat::kAttnFp8, dims, 4);
  std::mt19937 rng(104);
  auto vals = random_bf16(128, rng);
  std::vector<int32_t> slots{1000};  // outside the table
  m.add(vals);
  m.add(slots);
  m.add(table.bytes);
  const Dev d{&m};
  ops_->store_entries({d(vals.data()), 1, dims, d(table.table), d(slots.data())});
  EXPECT_THROW(m.fetch(table.bytes), Error);
  EXPECT_NO_THROW(m.fetch(table.bytes));  // reported once, then cleared
}

// ---- hyper-connections and embedding --------------------------------------------------------------

TEST_F(CudaOpsTest, HyperConnectionsAndEmbedMatchCpu) {
  std::mt19937 rng(105);
  for (const int64_t dim : {256, 4096}) {
    SCOPED_TRACE(dim);
    Mirror m(*dev_);
    const int hc = 4;
    const int64_t T = 9, mixes = (2 + hc) * hc;
    auto h = random_bf16(static_cast<size_t>(T * hc * dim), rng, 1.0f);
    auto fn = random_f32(static_cast<size_t>(mixes * hc * dim), rng, 0.02f);
    auto scale = random_f32(3, rng, 0.5f);
    auto base = random_f32(static_cast<size_t>(mixes), rng, 0.5f);
    std::vector<uint16_t> x(static_cast<size_t>(T * dim)), out(h.size()), y(x.size());
    std::vector<float> post(static_cast<size_t>(T * hc)), comb(static_cast<size_t>(T * hc * hc));
    for (auto* v : {&h, &x, &out, &y}) m.add(*v);
    for (auto* v : {&fn, &scale, &base, &post, &comb}) m.add(*v);
    auto pre = [&](auto P) {
      return HcPreParams{P(h.data()), T,     hc, dim,         P(fn.data()),   P(scale.data()), P(base.data()),
                         1e-6f,       1e-6f, 20, P(x.data()), P(post.data()), P(comb.data())};
    };
    cpu_.hc_pre(pre(Host{}));
    EXPECT_EQ(run_twice(m, x, [&] { ops_->hc_pre(pre(Dev{&m})); }), x);  // all bit for bit
    EXPECT_EQ(m.fetch(comb), comb);
    EXPECT_EQ(m.fetch(post), post);
    m.upload(post);  // the post step reads identical inputs on both sides
    m.upload(comb);
    m.upload(x);
    auto postp = [&](auto P) {
      return HcPostParams{P(x.data()), P(h.data()), P(post.data()), P(comb.data()), P(out.data()), T, hc, dim};
    };
    cpu_.hc_post(postp(Host{}));
    EXPECT_EQ(run_twice(m, out, [&] { ops_->hc_post(postp(Dev{&m})); }), out);
    auto head = [&](auto P) {
      return HcHeadParams{P(h.data()),    T,     hc,    dim,        P(fn.data()), P(scale.data()),
                          P(base.data()), 1e-6f, 1e-6f, P(y.data())};
    };
    cpu_.hc_head(head(Host{}));
    EXPECT_EQ(run_twice(m, y, [&] { ops_->hc_head(head(Dev{&m})); }), y);

    const int64_t vocab = 1000;
    auto table = random_bf16(static_cast<size_t>(vocab * dim), rng);
    std::vector<int32_t> ids(static_cast<size_t>(T));
    for (auto& i : ids) i = static_cast<int32_t>(rng() % vocab);
    std::vector<uint16_t> e(static_cast<size_t>(T * hc * dim));
    m.add(table);
    m.add(ids);
    m.add(e);
    auto emb = [&](auto P) { return EmbedParams{P(ids.data()), T, P(table.data()), vocab, dim, hc, P(e.data())}; };
    cpu_.embed(emb(Host{}));
    EXPECT_EQ(run_twice(m, e, [&] { ops_->embed(emb(Dev{&m})); }), e);
  }
}

TEST_F(CudaOpsTest, PagedSlotsMatchCpu) {
  std::mt19937 rng(108);
  Mirror m(*dev_);
  const int64_t lists = 5, rows = 70000;  // more rows than one grid's y dimension
  const int32_t stride = 8, per_page = 64, width = 512;
  std::vector<int32_t> pages(static_cast<size_t>(lists * stride)), list(static_cast<size_t>(rows)),
      first(static_cast<size_t>(rows)), count(static_cast<size_t>(rows)), out(static_cast<size_t>(rows * width)),
      base(static_cast<size_t>(lists));
  for (auto& p : pages) p = rng() % 9 == 0 ? -1 : static_cast<int32_t>(rng() % 100000);
  for (auto& b : base) b = static_cast<int32_t>(rng() % 4) * per_page;
  for (size_t r = 0; r < list.size(); ++r) {
    list[r] = static_cast<int32_t>(rng() % lists);
    first[r] = base[static_cast<size_t>(list[r])] + static_cast<int32_t>(rng() % 100);
    const int32_t room = base[static_cast<size_t>(list[r])] + stride * per_page - first[r];
    count[r] = static_cast<int32_t>(rng() % (std::min(room, width) + 1));
  }
  // Read as block ids: blocks 0..99999 of a map of 3 layers; and as rows of a table (list k: row lists-1-k).
  std::vector<int32_t> map(300000), row_of(static_cast<size_t>(lists));
  for (auto& p : map) p = rng() % 9 == 0 ? -1 : static_cast<int32_t>(rng() % 100000);
  for (size_t k = 0; k < row_of.size(); ++k) row_of[k] = static_cast<int32_t>(lists - 1 - static_cast<int64_t>(k));
  for (auto* v : {&pages, &list, &first, &count, &out, &base, &map, &row_of}) m.add(*v);
  auto params = [&](auto P, bool mapped, bool rows_of_table) {
    PagedSlotsParams p{rows,           width, P(list.data()), P(first.data()), P(count.data()), P(pages.data()),
                       P(base.data()), lists, stride,         per_page,        P(out.data()),   {},
                       nullptr,        0};
    if (mapped) p.map = {P(map.data()), 0, 100000, 3, 1};
    if (rows_of_table) {
      p.list_row = P(row_of.data());
      p.page_rows = lists;
    }
    return p;
  };
  for (const bool mapped : {false, true})
    for (const bool rows_of_table : {false, true}) {
      cpu_.paged_slots(params(Host{}, mapped, rows_of_table));
      EXPECT_EQ(run_twice(m, out, [&] { ops_->paged_slots(params(Dev{&m}, mapped, rows_of_table)); }), out)
          << "mapped " << mapped << " rows of a table " << rows_of_table;
    }
}

TEST_F(CudaOpsTest, ArgmaxMatchesCpu) {
  std::mt19937 rng(110);
  Mirror m(*dev_);
  const int64_t rows = 33, cols = 129280, limit = 128000;
  auto x = random_f32(static_cast<size_t>(rows * cols), rng, 3.0f);
  for (int64_t r = 0; r < rows; r += 4) {  // exact ties: the lower index must win
    const size_t a = static_cast<size_t>(r * cols + 1000), b = static_cast<size_t>(r * cols + 90000);
    x[a] = x[b] = 100.0f;
  }
  x[static_cast<size_t>(2 * cols + limit)] = 1000.0f;  // past the limit: never chosen
  std::vector<int32_t> out(static_cast<size_t>(rows));
  m.add(x);
  m.add(out);
  auto params = [&](auto P) { return ArgmaxParams{P(x.data()), rows, cols, limit, P(out.data())}; };
  cpu_.argmax(params(Host{}));
  EXPECT_EQ(run_twice(m, out, [&] { ops_->argmax(params(Dev{&m})); }), out);
  EXPECT_EQ(out[0], 1000);
}

// ---- compressor, indexer, MoE ----------------------------------------------------------------------

// A prefill of T tokens through compressor_step and compressor_emit (ratio 4 overlap or 128), then the
// indexer over the keys it wrote: entries byte-identical, top-k identical.
TEST_F(CudaOpsTest, CompressorAndIndexerMatchCpu) {
  struct Case {
    int64_t dim, tokens;
    int ratio, dc, heads, topk;
    bool indexer;
  };
  const Case cases[] = {{256, 260, 4, 128, 4, 8, true},
                        {256, 300, 128, 128, 4, 8, false},
                        {4096, 64, 4, 512, 64, 512, false},
                        {4096, 2048, 4, 128, 64, 512, true}};
  std::mt19937 rng(106);
  const ModelConfig flash = v4_flash_config();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dim * 10000 + c.tokens);
    Mirror m(*dev_);
    const int cc = c.ratio == 4 ? 2 : 1;
    const int64_t cd = int64_t{cc} * c.dc, T = c.tokens, entries = T / c.ratio;
    auto x = random_bf16(static_cast<size_t>(T * c.dim), rng, 1.0f);
    auto wkv = random_bf16(static_cast<size_t>(cd * c.dim), rng, 0.05f);
    auto wgate = random_bf16(static_cast<size_t>(cd * c.dim), rng, 0.05f);
    auto ape = random_f32(static_cast<size_t>(c.ratio * cd), rng, 0.5f);
    auto norm = random_bf16(static_cast<size_t>(c.dc), rng, 0.2f);
    for (auto& v : norm) v = float_to_bf16(1 + bf16_to_float(v));
    std::vector<int32_t> pos(static_cast<size_t>(T)), state_slots(static_cast<size_t>(T));
    std::iota(pos.begin(), pos.end(), 0);
    std::iota(state_slots.begin(), state_slots.end(), 0);
    OwnedTable state(T, KvEntryFormat::kF32, {static_cast<int>(2 * cd), 0}, 16);
    const KvEntryFormat of = c.indexer ? KvEntryFormat::kIndexFp4 : KvEntryFormat::kAttnFp8;
    const KvEntryDims odims{c.dc, c.indexer ? 0 : 64};
    OwnedTable out(entries, of, odims, 8);
    std::vector<int32_t> blocks(static_cast<size_t>(entries)), rows, out_slots(static_cast<size_t>(entries));
    for (int64_t i = 0; i < entries; ++i) {
      blocks[static_cast<size_t>(i)] = static_cast<int32_t>(i);
      out_slots[static_cast<size_t>(i)] = static_cast<int32_t>(entries - 1 - i);  // scattered
      if (cc == 2)
        for (int r = 0; r < c.ratio; ++r) rows.push_back(i == 0 ? -1 : static_cast<int32_t>((i - 1) * c.ratio + r));
      for (int r = 0; r < c.ratio; ++r) rows.push_back(static_cast<int32_t>(i * c.ratio + r));
    }
    for (auto* v : {&x, &wkv, &wgate, &norm}) m.add(*v);
    for (auto* v : {&pos, &state_slots, &blocks, &rows, &out_slots}) m.add(*v);
    m.add(ape);
    m.add(state.bytes);
    m.add(out.bytes);
    const RopeConfig rope = rope_config(flash, c.ratio);
    auto step = [&](auto P) {
      return CompressorStepParams{P(x.data()),
                                  T,
                                  c.dim,
                                  P(pos.data()),
                                  Weight::bf16(P(wkv.data()), cd, c.dim),
                                  Weight::bf16(P(wgate.data()), cd, c.dim),
                                  P(ape.data()),
                                  c.ratio,
                                  c.dc,
                                  P(state.table),
                                  P(state_slots.data())};
    };
    auto emit = [&](auto P) {
      CompressorEmitParams e;
      e.entries = entries;
      e.block_index = P(blocks.data());
      e.rows = P(rows.data());
      e.state = P(state.table);
      e.ratio = c.ratio;
      e.head_dim = c.dc;
      e.rope_dim = 64;
      e.norm_weight = P(norm.data());
      e.rope = rope;
      e.indexer = c.indexer;
      e.out = P(out.table);
      e.out_slots = P(out_slots.data());
      return e;
    };
    cpu_.compressor_step(step(Host{}));
    ops_->compressor_step(step(Dev{&m}));
    EXPECT_EQ(m.fetch(state.bytes), state.bytes) << "compressor state rows differ";
    m.upload(state.bytes);  // emit from identical state on both sides
    cpu_.compressor_emit(emit(Host{}));
    ops_->compressor_emit(emit(Dev{&m}));
    EXPECT_EQ(m.fetch(out.bytes), out.bytes) << "compressed entries differ";
    if (!c.indexer) continue;

    // The indexer over those keys: 3 queries per sequence, two sequences sharing the table.
    const int64_t Q = 6, d = c.dc;
    auto q = random_bf16(static_cast<size_t>(Q * c.heads * d), rng, 1.0f);
    cpu_.hadamard({q.data(), Q * c.heads, static_cast<int>(d)});
    cpu_.quant_sim({q.data(), Q * c.heads, d, d, QuantSim::kFp4, 32});
    auto w = random_bf16(static_cast<size_t>(Q * c.heads), rng, 1.0f);
    std::vector<int32_t> qpos{
        static_cast<int32_t>(T - 1), static_cast<int32_t>(T / 2), 9, static_cast<int32_t>(T - 1), 100,
        static_cast<int32_t>(T - 3)};
    std::vector<int32_t> tseq{0, 0, 0, 1, 1, 1}, key_slots(static_cast<size_t>(2 * entries)),
        count{static_cast<int32_t>(entries), static_cast<int32_t>(entries / 2)};
    for (int64_t j = 0; j < entries; ++j) {
      key_slots[static_cast<size_t>(j)] = out_slots[static_cast<size_t>(j)];
      key_slots[static_cast<size_t>(entries + j)] = out_slots[static_cast<size_t>((j * 7) % entries)];
    }
    std::vector<int32_t> idx(static_cast<size_t>(Q * c.topk)), slots(idx.size());
    for (auto* v : {&q, &w}) m.add(*v);
    for (auto* v : {&qpos, &tseq, &key_slots, &count, &idx, &slots}) m.add(*v);
    auto ix = [&](auto P) {
      IndexerTopkParams p;
      p.q = P(q.data());
      p.weights = P(w.data());
      p.weight_scale = 1.0f / std::sqrt(static_cast<float>(d * c.heads));
      p.tokens = Q;
      p.heads = c.heads;
      p.head_dim = static_cast<int>(d);
      p.positions = P(qpos.data());
      p.token_seq = P(tseq.data());
      p.sequences = 2;
      p.keys = P(out.table);
      p.key_slots = P(key_slots.data());
      p.key_stride = static_cast<int32_t>(entries);
      p.key_count = P(count.data());
      p.topk = c.topk;
      p.out_index = P(idx.data());
      p.slot_map = P(key_slots.data());
      p.out_slots = P(slots.data());
      return p;
    };
    cpu_.indexer_topk(ix(Host{}));
    EXPECT_EQ(run_twice(m, idx, [&] { ops_->indexer_topk(ix(Dev{&m})); }), idx) << "top-k indices differ";
    EXPECT_EQ(m.fetch(slots), slots) << "top-k slots differ";
  }
}

// The swiglu op on both CUDA paths (16-byte vectors; other widths and offsets element by element),
// with and without the clamp and routing weights, in place as the shared expert runs it: the CPU's bits.
TEST_F(CudaOpsTest, SwigluMatchesCpu) {
  struct Case {
    int64_t rows, dim;
    float limit;
    bool weighted, in_place;
    int64_t shift;  // elements every buffer starts into its allocation (1: not 16-byte aligned)
  };
  const Case cases[] = {{37, 2048, 0.0f, false, true, 0},
                        {5, 512, 10.0f, true, false, 0},
                        {9, 100, 3.0f, true, true, 0},
                        {3, 1024, 3.0f, false, false, 1}};
  std::mt19937 rng(110);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "rows " << c.rows << " dim " << c.dim << " shift " << c.shift);
    Mirror m(*dev_);
    const size_t n = static_cast<size_t>(c.rows * c.dim + c.shift);
    const auto g = random_bf16(n, rng, 8.0f);  // beyond the limits
    auto u = random_bf16(n, rng, 8.0f), work = g, out = std::vector<uint16_t>(n);
    auto w = random_f32(static_cast<size_t>(c.rows), rng, 0.5f);
    for (auto* v : {&u, &work, &out}) m.add(*v);
    m.add(w);
    auto params = [&](auto P) {
      uint16_t* dst = P(c.in_place ? work.data() : out.data()) + c.shift;
      return SwigluParams{P(work.data()) + c.shift,
                          P(u.data()) + c.shift,
                          c.rows,
                          c.dim,
                          c.limit,
                          c.weighted ? P(w.data()) : nullptr,
                          dst};
    };
    auto want = c.in_place ? work : out;
    SwigluParams host = params(Host{});
    host.out = want.data() + c.shift;
    cpu_.swiglu(host);
    auto& result = c.in_place ? work : out;
    const auto got = run_twice(m, result, [&] {
      m.upload(work);  // g again (in place the op overwrote it)
      ops_->swiglu(params(Dev{&m}));
    });
    EXPECT_EQ(std::vector<uint16_t>(got.begin() + c.shift, got.end()),
              std::vector<uint16_t>(want.begin() + c.shift, want.end()));
  }
}

TEST_F(CudaOpsTest, MoeMatchesCpu) {
  struct Case {
    int64_t dim, inter, tokens;
    int experts, topk;
    WeightType routed;
  };
  const Case cases[] = {{256, 128, 5, 8, 2, WeightType::kFp4Block},
                        {256, 128, 64, 8, 2, WeightType::kFp8Block},
                        {4096, 2048, 32, 64, 6, WeightType::kFp4Block}};
  std::mt19937 rng(107);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dim * 1000 + c.tokens);
    Mirror m(*dev_);
    auto x = random_bf16(static_cast<size_t>(c.tokens * c.dim), rng, 1.0f);
    auto gw = random_bf16(static_cast<size_t>(c.experts * c.dim), rng, 0.05f);
    auto bias = random_f32(static_cast<size_t>(c.experts), rng, 0.1f);
    std::vector<int32_t> idx(static_cast<size_t>(c.tokens * c.topk));
    std::vector<float> wts(idx.size());
    m.add(x);
    m.add(gw);
    m.add(bias);
    m.add(idx);
    m.add(wts);
    auto gate = [&](auto P) {
      MoeGateParams g;
      g.x = P(x.data());
      g.tokens = c.tokens;
      g.dim = c.dim;
      g.weight = Weight::bf16(P(gw.data()), c.experts, c.dim);
      g.bias = P(bias.data());
      g.experts = c.experts;
      g.topk = c.topk;
      g.route_scale = 1.5f;
      g.indices = P(idx.data());
      g.weights = P(wts.data());
      return g;
    };
    cpu_.moe_gate(gate(Host{}));
    EXPECT_EQ(run_twice(m, idx, [&] { ops_->moe_gate(gate(Dev{&m})); }), idx) << "routing differs";
    EXPECT_LE(normalized_error(m.fetch(wts), wts), 1e-6);

    // Experts: the same routing on both sides.
    m.upload(idx);
    m.upload(wts);
    std::vector<std::unique_ptr<Fp4Weight>> f4;
    std::vector<std::unique_ptr<Fp8Weight>> f8;
    std::vector<Weight> hw1, hw2, hw3, dw1, dw2, dw3;
    auto make = [&](int64_t r, int64_t k, std::vector<Weight>& h, std::vector<Weight>& d) {
      if (c.routed == WeightType::kFp4Block) {
        f4.push_back(std::make_unique<Fp4Weight>(r, k, rng));
        h.push_back(f4.back()->view());
        m.add(f4.back()->data);
        m.add(f4.back()->scale);
      } else {
        f8.push_back(std::make_unique<Fp8Weight>(r, k, rng));
        h.push_back(f8.back()->view());
        m.add(f8.back()->data);
        m.add(f8.back()->scale);
      }
      d.push_back(Dev{&m}(h.back()));
    };
    for (int e = 0; e < c.experts; ++e) {
      make(c.inter, c.dim, hw1, dw1);
      make(c.inter, c.dim, hw3, dw3);
      make(c.dim, c.inter, hw2, dw2);
    }
    Fp8Weight s1(c.inter, c.dim, rng), s3(c.inter, c.dim, rng), s2(c.dim, c.inter, rng);
    for (auto* w : {&s1, &s3, &s2}) {
      m.add(w->data);
      m.add(w->scale);
    }
    std::vector<uint16_t> y(x.size());
    m.add(y);
    auto experts = [&](auto P, const std::vector<Weight>& w1, const std::vector<Weight>& w3,
                       const std::vector<Weight>& w2) {
      MoeExpertsParams e;
      e.x = P(x.data());
      e.tokens = c.tokens;
      e.dim = c.dim;
      e.inter_dim = c.inter;
      e.indices = P(idx.data());
      e.weights = P(wts.data());
      e.topk = c.topk;
      e.experts = c.experts;
      e.w1 = w1.data();
      e.w3 = w3.data();
      e.w2 = w2.data();
      e.shared_w1 = P(s1.view());
      e.shared_w3 = P(s3.view());
      e.shared_w2 = P(s2.view());
      e.swiglu_limit = 10.0f;
      e.y = P(y.data());
      return e;
    };
    cpu_.moe_experts(experts(Host{}, hw1, hw3, hw2));
    const auto got = run_twice(m, y, [&] { ops_->moe_experts(experts(Dev{&m}, dw1, dw3, dw2)); });
    EXPECT_LE(normalized_error(got, y), 1e-2);
  }
}

}  // namespace
}  // namespace dsv4
