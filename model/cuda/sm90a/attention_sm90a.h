/* The Hopper-only (sm_90a: wgmma) attention kernels, compiled for the "90a" architecture when
 * the build targets 90 (CMakeLists.txt). Everything else reaches them through
 * gdn_cuda_attention_fwd / _bwd, which ask gdn_cuda_attention_sm90a_available() first
 * (attention_cuda.h). */
#ifndef GDN_ATTENTION_SM90A_H
#define GDN_ATTENTION_SM90A_H

#include "model/cuda/attention_common.cuh"

namespace attn {
/* bf16 forward, D 64 or 128, asynchronous on stream (a cudaStream_t). */
void sm90a_fwd(const Params &p, int D, void *stream);
/* bf16 backward, D 64 or 128: reads p.delta (rowsum(d_o * o), computed by the caller); dq_acc:
 * B*T*H*D floats of scratch (zeroed here). Writes p.dq, p.dk, p.dv. */
void sm90a_bwd(const Params &p, int D, float *dq_acc, void *stream);
} // namespace attn

#endif
