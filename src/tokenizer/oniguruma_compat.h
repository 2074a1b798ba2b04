// Translates a Split regex of tokenizer.json, written for Oniguruma (what HF tokenizers runs), into a PCRE2
// pattern that matches the same strings:
//  * \s and \S become Unicode White_Space (PCRE2's UCP \s also takes U+180E, Oniguruma's does not);
//  * \p{L|M|N|P|S} also take the code points Unicode assigned after PCRE2's tables (unicode_delta.h);
//  * \uHHHH becomes \x{HHHH}.
// Constructs whose meaning differs between the engines (\w, \d, \h, \b, POSIX or nested classes, other
// Unicode properties, ...) are refused with a dsv4::Error naming them, rather than silently mistranslated.
#pragma once

#include <string>
#include <string_view>

namespace dsv4 {

std::string oniguruma_to_pcre2(std::string_view pattern);

}  // namespace dsv4
