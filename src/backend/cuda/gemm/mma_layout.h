// Operand layouts of the tensor-core kernels that arithmetic alone defines, as host-and-device functions
// so that the CPU tests check the pairing every kernel relies on.
//
// wgmma's K-major shared-memory tile with the 128-byte swizzle (sw128_desc in ptx.cuh): rows of 128
// bytes, 8-row groups 1024 bytes apart, the 16-byte unit u of row r stored at unit u ^ (r % 8).
//
// The indexer's dots on wgmma (indexer.cu): thread t of a warp decodes the 32-wide block t of each of its
// keys, so in k step s (16 of the 128 dims) its A slots 2t, 2t + 1, 2t + 8, 2t + 9 (the mma.sync m16n8k16
// A layout) hold that block's elements 4s .. 4s + 3. q's B tile must hold, at logical K position
// p = 16s + slot, the dim that A slot holds: the K order of a dot is free as long as both operands agree.
#pragma once

#include "core/host_device.h"

namespace dsv4::cuda {

// Byte offset of byte `byte` (0..127) of row `row` in a 128-byte-swizzled tile.
DSV4_HOST_DEVICE int sw128_offset(int row, int byte) {
  return row * 128 + (((byte / 16) ^ (row % 8)) << 4) + byte % 16;
}

// The logical K position (0..127) of q's B tile that holds `dim`: block t = dim / 32, k step (dim % 32) / 4,
// slot 2t (+ 8 for the step's elements 2 and 3) + dim % 2.
DSV4_HOST_DEVICE int indexer_b_position(int dim) {
  return 16 * (dim % 32 / 4) + 2 * (dim / 32) + 8 * (dim % 4 / 2) + dim % 2;
}

}  // namespace dsv4::cuda
