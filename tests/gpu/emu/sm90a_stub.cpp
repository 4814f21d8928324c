// The wgmma (sm_90a) attention kernels have no CPU emulation: the emulated GPU reports that it
// lacks them, so the launchers take the mma.sync kernels, which are what the emulator checks.
#include <stdio.h>
#include <stdlib.h>

#include "model/cuda/sm90a/attention_sm90a.h"

extern "C" int gdn_cuda_attention_sm90a_available(void) { return 0; }
bool attn::sm90a_ws_usable(const attn::Params &, attn::WsKernel) { return false; }
void attn::sm90a_fwd(const attn::Params &, int, int, void *) {
    fprintf(stderr, "emu: the wgmma kernels are not emulated\n");
    abort();
}
void attn::sm90a_bwd(const attn::Params &, int, float *, int, int, void *) {
    fprintf(stderr, "emu: the wgmma kernels are not emulated\n");
    abort();
}
