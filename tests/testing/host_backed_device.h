// A Device over host memory for tests that stand in for a GPU or watch a device's queue: every call
// goes to a HostDevice; a test device overrides only what it changes or records.
#pragma once

#include "backend/device.h"

namespace dsv4::testing {

class HostBackedDevice : public Device {
 public:
  // host_memory false: callers must copy as they would on a GPU (the bytes are host bytes all the same).
  explicit HostBackedDevice(bool host_memory) : host_memory_(host_memory) {}
  bool host_memory() const override { return host_memory_; }
  uint64_t memory_capacity() const override { return host_.memory_capacity(); }
  uint64_t memory_free() const override { return host_.memory_free(); }
  void* allocate(size_t bytes) override { return host_.allocate(bytes); }
  void release(void* p) override { host_.release(p); }
  void to_device(void* dst, const void* src, size_t bytes) override { host_.to_device(dst, src, bytes); }
  void to_host(void* dst, const void* src, size_t bytes) override { host_.to_host(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { host_.copy(dst, src, bytes); }
  void fill_zero(void* p, size_t bytes) override { host_.fill_zero(p, bytes); }
  void synchronize() override {}

 protected:
  HostDevice host_;

 private:
  bool host_memory_;
};

}  // namespace dsv4::testing
