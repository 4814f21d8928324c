/* The CPU emulator's runtime (see run.sh): each CUDA thread of a block is a coroutine on its own
 * stack (a minimal x86-64 register switch, no system calls); __syncthreads and the warp
 * collectives are barriers over those coroutines, and a collective computes each lane's result
 * from every lane's inputs exactly as the PTX manual lays out ldmatrix (plain and .trans) and
 * mma.sync.m16n8k16.row.col bf16 fragments. Blocks run one after another; shared memory starts
 * filled with 0xFF (bf16 NaN) so a read of an unwritten element shows; cp.async copies at once
 * and counts as a write at issue; shared-memory accesses are checked for races between warps
 * (shadow_access). The CUDA runtime calls the attention code and its test use are plain host
 * memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "cuda_runtime.h"

struct EmuThread { void *sp; uint3_ tid; bool done; char *stack; };
extern "C" void emu_switch(void **from_sp, void *to_sp);
asm(".text\n.globl emu_switch\nemu_switch:\n"
    "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
    "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
    "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n");
EmuThread *emu_cur = nullptr;
uint3_ blockIdx, gridDim, blockDim;
uint3_ &emu_tid() { return emu_cur->tid; }

static void *sched_sp;
static std::function<void()> g_fn;
static std::vector<EmuThread> threads;
static std::vector<unsigned char> smem_buf;
static const size_t STACK = 256 * 1024;

struct Bar { int count = 0, gen = 0; };
static Bar block_bar, warp_bar[32];
static void yield_() { emu_switch(&emu_cur->sp, sched_sp); }
static void bar_wait(Bar &b, int n) {
    int g = b.gen;
    if (++b.count == n) { b.count = 0; b.gen++; }
    else while (b.gen == g) yield_();
}
static int nthreads_block;
void __syncthreads() { bar_wait(block_bar, nthreads_block); }

/* Shared-memory hazard check (what racecheck does on the GPU): per 2-byte element the barrier
 * epoch and warp of the last write and the warps that read it in the current epoch. Another
 * warp's access to an element between the same two barriers is a race: read after write, write
 * after read, write after write. A cp.async counts as written when issued (its data may be read
 * only after a wait and a barrier). */
struct Shadow { int w_epoch = -1, w_warp = -1, r_epoch = -1; unsigned r_warps = 0; };
static std::vector<Shadow> shadow;
static size_t smem_lo_;
static void hazard(const char *what, size_t a) {
    fprintf(stderr, "EMU: shared-memory race (%s) at byte %zu, block (%u,%u,%u), warp %u\n", what,
            a - smem_lo_, blockIdx.x, blockIdx.y, blockIdx.z, emu_cur->tid.x / 32);
    abort();
}
static void shadow_access(const void *p, int bytes, bool write) {
    const int epoch = block_bar.gen, w = emu_cur->tid.x / 32;
    for (size_t a = (size_t)p; a < (size_t)p + bytes; a += 2) {
        Shadow &s = shadow[(a - smem_lo_) / 2];
        if (s.w_epoch == epoch && s.w_warp != w) hazard(write ? "write after write" : "read after write", a);
        if (write) {
            if (s.r_epoch == epoch && (s.r_warps & ~(1u << w))) hazard("write after read", a);
            s.w_epoch = epoch;
            s.w_warp = w;
        } else {
            if (s.r_epoch != epoch) { s.r_epoch = epoch; s.r_warps = 0; }
            s.r_warps |= 1u << w;
        }
    }
}
static void warp_sync() { bar_wait(warp_bar[emu_cur->tid.x / 32], 32); }

static float wf[32][32];
static const void *wp[32][32];
static unsigned wa[32][32][4], wb[32][32][2];

float __shfl_xor_sync(unsigned, float x, int o) {
    int w = emu_cur->tid.x / 32, l = emu_cur->tid.x % 32;
    wf[w][l] = x; warp_sync();
    float r = wf[w][l ^ o]; warp_sync();
    return r;
}
/* lane l reads lane l - o (its own value where l < o) */
float __shfl_up_sync(unsigned, float x, int o) {
    int w = emu_cur->tid.x / 32, l = emu_cur->tid.x % 32;
    wf[w][l] = x; warp_sync();
    float r = wf[w][l >= o ? l - o : l]; warp_sync();
    return r;
}
int __shfl_up_sync(unsigned m, int x, int o) {
    float f;
    memcpy(&f, &x, 4);
    f = __shfl_up_sync(m, f, o);
    int r;
    memcpy(&r, &f, 4);
    return r;
}
static uint16_t ld16(const void *p, int i) { uint16_t v; memcpy(&v, (const char *)p + 2 * i, 2); return v; }
static size_t smem_lo, smem_hi;
static void check_smem(const void *p, int bytes) {
    size_t a = (size_t)p;
    if (a < smem_lo || a + bytes > smem_hi) { fprintf(stderr, "EMU: ldmatrix address outside shared memory\n"); abort(); }
    if (a & 15) { fprintf(stderr, "EMU: ldmatrix row address not 16-byte aligned\n"); abort(); }
}
void emu_ldsm(unsigned (&r)[4], const void *p, bool trans) {
    int w = emu_cur->tid.x / 32, l = emu_cur->tid.x % 32;
    check_smem(p, 16);
    shadow_access(p, 16, false);
    wp[w][l] = p; warp_sync();
    for (int m = 0; m < 4; m++) {
        uint16_t lo, hi;
        if (!trans) { const void *row = wp[w][8 * m + l / 4]; lo = ld16(row, 2 * (l % 4)); hi = ld16(row, 2 * (l % 4) + 1); }
        else { lo = ld16(wp[w][8 * m + 2 * (l % 4)], l / 4); hi = ld16(wp[w][8 * m + 2 * (l % 4) + 1], l / 4); }
        r[m] = (unsigned)lo | ((unsigned)hi << 16);
    }
    warp_sync();
}
static float bfv(unsigned reg, int half) { __nv_bfloat16 h; h.x = (uint16_t)(half ? reg >> 16 : reg & 0xffff); return __bfloat162float(h); }
void emu_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    int w = emu_cur->tid.x / 32, l = emu_cur->tid.x % 32;
    for (int i = 0; i < 4; i++) wa[w][l][i] = a[i];
    wb[w][l][0] = b0; wb[w][l][1] = b1;
    warp_sync();
    int g = l / 4, cc = l % 4;
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e / 2), col = 2 * cc + (e % 2);
        float s = c[e];
        for (int k = 0; k < 16; k++) {
            int al = (row % 8) * 4 + (k % 8) / 2, areg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
            int bl = col * 4 + (k % 8) / 2, breg = k >= 8 ? 1 : 0;
            s += bfv(wa[w][al][areg], k % 2) * bfv(wb[w][bl][breg], k % 2);
        }
        c[e] = s;
    }
    warp_sync();
}
void emu_cp16(void *s, const void *g, bool valid) {
    size_t a = (size_t)s;
    if (a < smem_lo || a + 16 > smem_hi || (a & 15) || ((size_t)g & 15)) { fprintf(stderr, "EMU: bad cp.async\n"); abort(); }
    shadow_access(s, 16, true);
    if (valid) memcpy(s, g, 16); else memset(s, 0, 16);
}
unsigned char *emu_smem() { return smem_buf.data(); }

static void trampoline() { g_fn(); emu_cur->done = true; for (;;) emu_switch(&emu_cur->sp, sched_sp); }

void emu_run_grid(dim3 grid, dim3 block, size_t smem, std::function<void()> fn) {
    if (smem > 227 * 1024) { fprintf(stderr, "EMU: smem %zu over limit\n", smem); abort(); }
    g_fn = fn;
    gridDim = {grid.x, grid.y, grid.z};
    blockDim = {block.x, 1, 1};
    nthreads_block = block.x;
    threads.resize(block.x);
    for (auto &t : threads) if (!t.stack) t.stack = (char *)malloc(STACK);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = {x, y, z};
                smem_buf.assign(smem + 16, 0xFF); /* NaN bf16 pattern: unwritten reads show */
                smem_lo = (size_t)smem_buf.data(); smem_hi = smem_lo + smem;
                smem_lo_ = smem_lo;
                shadow.assign(smem / 2 + 8, Shadow());
                block_bar = Bar(); for (auto &b : warp_bar) b = Bar();
                for (unsigned i = 0; i < block.x; i++) {
                    EmuThread &t = threads[i];
                    t.tid = {i, 0, 0}; t.done = false;
                    uintptr_t top = ((uintptr_t)t.stack + STACK) & ~(uintptr_t)15;
                    void **sp = (void **)(top - 64);
                    for (int r = 0; r < 6; r++) sp[r] = nullptr;
                    sp[6] = (void *)trampoline;
                    t.sp = sp;
                }
                long spins = 0;
                for (;;) {
                    bool any = false;
                    for (unsigned i = 0; i < block.x; i++) {
                        if (threads[i].done) continue;
                        any = true;
                        emu_cur = &threads[i];
                        emu_switch(&sched_sp, threads[i].sp);
                    }
                    if (!any) break;
                    if (++spins > 2000000000L) { fprintf(stderr, "EMU: deadlock?\n"); abort(); }
                }
                /* a barrier with waiters left means divergent barriers */
                if (block_bar.count) { fprintf(stderr, "EMU: block barrier left with %d waiting\n", block_bar.count); abort(); }
            }
}

extern "C" {
/* exact sizes, so an address sanitizer build sees any access past a buffer's end */
cudaError_t cudaMalloc(void **p, size_t n) { return posix_memalign(p, 256, n ? n : 1) ? cudaErrorUnknown : cudaSuccess; }
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind) { memcpy(d, s, n); return cudaSuccess; }
cudaError_t cudaMemset(void *d, int v, size_t n) { memset(d, v, n); return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = nullptr; return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = nullptr; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t) { return "emu error"; }
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = nullptr; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t, cudaEvent_t) { *ms = 0; return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind, cudaStream_t) {
    memcpy(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) { memset(d, v, n); return cudaSuccess; }
cudaError_t cudaMemcpy2DAsync(void *d, size_t dpitch, const void *s, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind, cudaStream_t) {
    for (size_t r = 0; r < height; r++) memcpy((char *)d + r * dpitch, (const char *)s + r * spitch, width);
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { *e = nullptr; return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t fn, void *user) { fn(user); return cudaSuccess; }
int gdn_cuda_device_count(void) { return 1; }
}
