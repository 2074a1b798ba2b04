// The KV host tier's batched page copies (page_copy.h) through CudaDevice::copy_many: pinned host pages into device
// memory and back, 16-byte and odd sizes and offsets, more pages than one kernel launch takes, on the main and the copy
// stream; every byte lands, nothing around a page is written.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/page_copy.h"

namespace dsv4 {
namespace {

struct Page {
  size_t at, bytes;  // offset in the host and the device buffer (each page at the same offset)
};

// Pages with gaps between them (the gaps must stay as they were): sizes of the host tier's groups
// (400 B, 4 KB, 17,216 B) and odd ones at odd offsets.
std::vector<Page> layout(int count, uint32_t seed, size_t* total) {
  std::mt19937 rng(seed);
  const size_t sizes[] = {400, 4096, 17216, 1, 33, 1000};
  std::vector<Page> pages;
  size_t at = 0;
  for (int i = 0; i < count; ++i) {
    const size_t bytes = sizes[rng() % 6];
    at += 16 * (1 + rng() % 3) + (bytes % 16 ? rng() % 16 : 0);  // a gap; odd pages at odd offsets
    pages.push_back({at, bytes});
    at += bytes;
  }
  *total = at + 64;
  return pages;
}

std::vector<Device::Copy> copies(const std::vector<Page>& pages, uint8_t* dst, const uint8_t* src) {
  std::vector<Device::Copy> c;
  for (const Page& p : pages) c.push_back({dst + p.at, src + p.at, p.bytes});
  return c;
}

TEST(CudaPageCopy, EveryPageMovesAndNothingElse) {
  cuda::CudaDevice dev(0);
  for (const uint32_t seed : {7u, 8u}) {
    for (const bool background : {false, true}) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << (background ? " copy stream" : " main"));
      size_t total = 0;
      const std::vector<Page> pages = layout(cuda::kPageCopyMaxPages + 300, seed, &total);
      auto* host = static_cast<uint8_t*>(dev.allocate_pinned(total));
      auto* back = static_cast<uint8_t*>(dev.allocate_pinned(total));
      auto* gpu = static_cast<uint8_t*>(dev.allocate(total));
      std::mt19937 rng(11);
      for (size_t i = 0; i < total; ++i) host[i] = static_cast<uint8_t>(rng());
      std::memset(back, 0xA5, total);
      std::vector<uint8_t> poison(total, 0x5A);
      dev.to_device(gpu, poison.data(), total);
      dev.synchronize();
      if (background) dev.begin_background();
      dev.copy_many(copies(pages, gpu, host));  // restores
      dev.copy_many(copies(pages, back, gpu));  // offloads, in stream order after them
      if (background) {
        const uint64_t ticket = dev.end_background();
        while (!dev.landed(ticket)) {
        }
      }
      dev.synchronize();
      std::vector<uint8_t> want(total, 0xA5);
      for (const Page& p : pages) std::memcpy(want.data() + p.at, host + p.at, p.bytes);
      EXPECT_EQ(std::memcmp(back, want.data(), total), 0) << "a page lost or a gap written";
      std::vector<uint8_t> on_gpu(total);
      dev.to_host(on_gpu.data(), gpu, total);
      size_t gap_writes = 0;
      size_t next = 0;
      for (const Page& p : pages) {
        for (; next < p.at; ++next) gap_writes += on_gpu[next] != 0x5A;
        next = p.at + p.bytes;
      }
      EXPECT_EQ(gap_writes, 0u) << "device bytes between pages written";
      dev.release(gpu);
      dev.release_pinned(back);
      dev.release_pinned(host);
    }
  }
}

}  // namespace
}  // namespace dsv4
