# Writes host-C++ copies of the CUDA delta-rule sources for the CPU emulator (emu_delta.sh,
# emu_attn.sh), after tests/gpu/emu/gen.py has written mma_common.cuh: delta_common.cuh with the
# tf32 helpers emulated (round to nearest, ties away, 10 mantissa bits; each m16n8k8 fragment
# element summed from shared memory), then delta_*.cu through emu_gen.py, less
# gdn_cuda_device_count (the emulator has its own). Usage: emu_delta_gen.py REPO_ROOT OUT_DIR
import os
import re
import subprocess
import sys

root, out = sys.argv[1], sys.argv[2]
SOURCES = ['delta_fwd.cu', 'delta_bwd.cu', 'delta_launch.cu', 'delta_hostio.cu']


def replace_fn(src, name, body):
    m = re.search(r'(template <int NT>\n)?__device__ __forceinline__ \w+ ' + name + r'\(.*?\n}\n', src, re.S)
    assert m, name
    return src[:m.start()] + body + src[m.end():]


s = open(root + '/model/cuda/delta_common.cuh').read()
s = replace_fn(s, 'f2tf32', '''__device__ __forceinline__ unsigned f2tf32(float x) {
    unsigned u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    return u;
}
''')
s = replace_fn(s, 'warp_mma_tf32', '''template <int NT>
__device__ __forceinline__ void warp_mma_tf32(float (&acc)[NT][4], const float *A, int lda,
                                              const float *B, int ldb, int kdim) {
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    auto tf = [](float x) { const unsigned u = f2tf32(x); float f; memcpy(&f, &u, 4); return f; };
    for (int nt = 0; nt < NT; ++nt)
        for (int e = 0; e < 4; ++e) {
            const int r = g + 8 * (e >> 1), c = nt * 8 + 2 * q + (e & 1);
            float sum = 0.f;
            for (int k = 0; k < kdim; ++k) sum += tf(A[r * lda + k]) * tf(B[k * ldb + c]);
            acc[nt][e] += sum;
        }
}
''')
assert 'asm' not in s, 'inline PTX left in delta_common.cuh'
os.makedirs(out + '/model/cuda', exist_ok=True)
open(out + '/model/cuda/delta_common.cuh', 'w').write(s)

subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), 'emu_gen.py'), root, out] + SOURCES,
               check=True)
p = out + '/model/cuda/delta_launch.cpp'
s, n = re.subn(r'int gdn_cuda_device_count\(void\) \{.*?\n\}\n', '', open(p).read(), count=1, flags=re.S)
assert n == 1
open(p, 'w').write(s)
