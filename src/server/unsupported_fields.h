// The request fields of vLLM's OpenAI server that this server does not act on: each is refused with a 400
// naming it (code not_supported) when it asks for something, so that none is silently ignored, or, where
// vLLM too does nothing with it for this model, accepted with its type checked. A field's harmless value
// (null, false, an empty list, the default) is always accepted, as clients send defaults. The list, with
// what each field does, is docs/server.md's compatibility table; tests/data/server/vllm_request_fields.json
// is the same list as data, walked by a test against both endpoints.
#pragma once

#include "server/request_fields.h"

namespace dsv4::server {

enum class Endpoint { kChat, kCompletions };

// Throws ApiError 400 for the first field that asks for what is not implemented, or that has the wrong type.
void refuse_unsupported(const RequestFields& f, Endpoint endpoint);

}  // namespace dsv4::server
