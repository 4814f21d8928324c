/* The backends of a build without CUDA (model/backend/cuda.c replaces this file otherwise). */
#include "model/backend.h"

const gdn_backend *gdn_backend_cuda(void) { return NULL; }

int gdn_backend_gpu_count(void) { return 0; }
