// A compile-time test: backend/op_params.h stays plain, because nvcc includes it into the kernels'
// files (the CUDA launchers take its structs), which cannot take fmt. Included first here, nothing of
// fmt or spdlog may come with it; if something does, this file, and with it the backend tests, no
// longer compiles. CPU-only builds check it too, where no nvcc would notice.
#include "backend/op_params.h"

#if defined(FMT_VERSION) || defined(SPDLOG_VERSION)
#error "backend/op_params.h pulls in fmt or spdlog"
#endif
