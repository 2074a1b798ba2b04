#include "tokenizer/split_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "core/error.h"
#include "tokenizer/oniguruma_compat.h"

namespace dsv4 {
namespace {

constexpr size_t kJitStackMax = 8u << 20;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// Per-thread match data, and a JIT stack larger than PCRE2's 32 KiB default for long pieces.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, kJitStackMax, nullptr);

  MatchState() {
    if (!data || !context || !stack) fail("out of memory for PCRE2 match state");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

SplitRegex SplitRegex::regex(std::string_view oniguruma_pattern) {
  return SplitRegex(oniguruma_to_pcre2(oniguruma_pattern), PCRE2_UTF | PCRE2_UCP);
}

SplitRegex SplitRegex::native(std::string_view pcre2_pattern) {
  return SplitRegex(std::string(pcre2_pattern), PCRE2_UTF | PCRE2_UCP);
}

SplitRegex SplitRegex::literal(std::string_view text) { return SplitRegex(std::string(text), PCRE2_LITERAL); }

SplitRegex::SplitRegex(std::string pattern, uint32_t options) : pattern_(std::move(pattern)) {
  if (pattern_.empty()) fail("Split pattern is empty");
  int err = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(), options | PCRE2_UTF, &err,
                        &offset, nullptr);
  if (!code_) fail("Split regex {:?} does not compile (at offset {}): {}", pattern_, offset, pcre2_message(err));
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

SplitRegex::SplitRegex(SplitRegex&& other) noexcept
    : pattern_(std::move(other.pattern_)), code_(std::exchange(other.code_, nullptr)), jit_(other.jit_) {}

SplitRegex& SplitRegex::operator=(SplitRegex&& other) noexcept {
  if (this != &other) {
    pcre2_code_free(code_);
    pattern_ = std::move(other.pattern_);
    code_ = std::exchange(other.code_, nullptr);
    jit_ = other.jit_;
  }
  return *this;
}

SplitRegex::~SplitRegex() { pcre2_code_free(code_); }

bool SplitRegex::find(std::string_view subject, size_t from, size_t& begin, size_t& end) const {
  MatchState& st = match_state();
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = jit_ ? pcre2_jit_match(code_, s, subject.size(), from, 0, st.data, st.context) : PCRE2_ERROR_JIT_STACKLIMIT;
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking state on the heap
    rc = pcre2_match(code_, s, subject.size(), from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, st.data, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) fail("Split regex {:?} failed on a {}-byte piece: {}", pattern_, subject.size(), pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
  begin = ov[0];
  end = ov[1];
  return true;
}

}  // namespace dsv4
