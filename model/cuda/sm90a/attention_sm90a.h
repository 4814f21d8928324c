/* The Hopper-only (sm_90a: wgmma) attention kernels, compiled for the "90a" architecture when
 * the build targets 90 (CMakeLists.txt). Everything else reaches them through
 * gdn_cuda_attention_fwd, which asks gdn_cuda_attention_sm90a_available() first. */
#ifndef GDN_ATTENTION_SM90A_H
#define GDN_ATTENTION_SM90A_H

#include "model/cuda/attention_common.cuh"

/* 1 when the current device is compute capability 9.0 and this binary carries sm_90a code for
 * it (probed once, then cached), else 0. */
extern "C" int gdn_cuda_attention_sm90a_available(void);

namespace attn {
/* bf16 forward, D 64 or 128, asynchronous on stream (a cudaStream_t). */
void sm90a_fwd(const Params &p, int D, void *stream);
} // namespace attn

#endif
