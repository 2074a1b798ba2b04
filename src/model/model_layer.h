// Model::Layer: one block's weights as the ops take them (views into the placed weights, wo_a's bf16
// form and on a GPU its FP8 twin, tid2eid as int32), shared by the files that implement Model.
#pragma once

#include <vector>

#include "model/model.h"

namespace dsv4 {

struct Model::Layer {
  int index = 0;
  int ratio = 0;
  const BlockWeights* w = nullptr;
  RopeConfig rope;
  Weight wq_a, wq_b, wkv, wo_a, wo_b;
  DeviceArray<uint16_t> wo_a_bf16;
  DeviceArray<uint8_t> wo_a_fp8, wo_a_fp8_scale;  // a GPU's copy of an FP8 checkpoint's wo_a (Weight's twin)
  Weight c_wkv, c_wgate, ix_wq_b, ix_proj, ixc_wkv, ixc_wgate;
  Weight gate;
  DeviceArray<int32_t> tid2eid;
  std::vector<Weight> w1, w2, w3;
  Weight s1, s2, s3;
  int heads = 0;  // this rank's attention heads
};

}  // namespace dsv4
