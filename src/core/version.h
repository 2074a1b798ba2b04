#pragma once

#include <string_view>

namespace dsv4 {
inline constexpr std::string_view kVersion = "0.1.0";
}
