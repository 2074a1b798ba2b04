// The ApiError a call throws (status 0 when it throws none): the request-parsing tests' probe.
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <utility>

#include "server/api_error.h"
#include "server/request_fields.h"

namespace dsv4::server {

template <typename F>
ApiError api_error_of(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "", "");
}

// Each body of `cases` (JSON text) refused by `parse` with a 400 naming its param.
template <typename Parse>
void expect_refusals(std::span<const std::pair<const char*, const char*>> cases, Parse&& parse) {
  for (const auto& [text, param] : cases) {
    const ApiError e = api_error_of([&] { parse(Json::parse(text)); });
    EXPECT_EQ(e.status(), 400) << text;
    EXPECT_EQ(e.param(), param) << text << ": " << e.what();
  }
}

}  // namespace dsv4::server
