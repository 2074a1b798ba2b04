#include "server/output_text.h"

namespace dsv4::server {

std::string OutputText::push(int32_t id) {
  if (stop_.matched()) return {};
  return stop_.push(detok_.push(id));
}

std::string OutputText::finish() {
  if (stop_.matched()) return {};
  std::string out = stop_.push(detok_.finish());
  if (!stop_.matched()) out += stop_.flush();
  return out;
}

}  // namespace dsv4::server
