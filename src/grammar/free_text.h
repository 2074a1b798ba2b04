// Free text up to a closing marker: any UTF-8 text that does not contain the marker, then the marker.
// Reasoning before "</think>" and raw string parameters before "</｜DSML｜parameter>" are such text.
// The text is matched by rules that track how much of the marker its end spells (Knuth-Morris-Pratt
// states), each calling the next in tail position, so any length runs in constant depth.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace dsv4::grammar {

// Text free of `marker`, then `marker` (a marker with no border, i.e. no proper prefix that is also a
// suffix, as both markers above: the first occurrence is then the closing one).
ExprId text_until(Grammar& g, std::string_view marker, std::string_view name);

}  // namespace dsv4::grammar
