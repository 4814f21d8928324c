# Writes host-C++ copies of the attention sources for the CPU emulator (see run.sh): the inline
# PTX helpers of mma_common.cuh (cp.async, ldmatrix, mma.sync) become calls into the
# emulator, the dynamic shared-memory declaration a pointer to the block's emulated shared
# memory, and each kernel<<<grid, block, smem, stream>>>(p) launch a call that runs the grid.
# Everything else, the kernels' index math, masking and synchronisation included, is the
# source as it is. Usage: gen.py REPO_ROOT OUT_DIR
import os
import re, sys
repo, out = sys.argv[1], sys.argv[2]
h = open(repo + '/model/cuda/mma_common.cuh').read()
def replace_fn(src, name, body):
    # replace the whole definition that starts with the line declaring `name(` up to the closing "\n}\n"
    m = re.search(r'(template <int N> )?__device__ __forceinline__ \w+ ' + name + r'\(.*?\n}\n', src, re.S)
    assert m, name
    return src[:m.start()] + body + src[m.end():]
h = replace_fn(h, 'cp_async16', '__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) { emu_cp16(smem, gmem, valid); }\n')
h = replace_fn(h, 'cp_async_commit', '__device__ __forceinline__ void cp_async_commit() {}\n')
h = replace_fn(h, 'cp_async_wait', 'template <int N> __device__ __forceinline__ void cp_async_wait() {}\n')
h = replace_fn(h, 'ldsm_x4', '__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void *p) { emu_ldsm(r, p, false); }\n')
h = replace_fn(h, 'ldsm_x4_t', '__device__ __forceinline__ void ldsm_x4_t(unsigned (&r)[4], const void *p) { emu_ldsm(r, p, true); }\n')
h = replace_fn(h, 'mma_bf16', '__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) { emu_mma(c, a, b0, b1); }\n')
assert 'asm' not in h, 'inline PTX left in mma_common.cuh: emulate it in gen.py'
assert 'asm' not in open(repo + '/model/cuda/attention_common.cuh').read(), 'inline PTX in attention_common.cuh: move it to mma_common.cuh'
os.makedirs(out + '/model/cuda', exist_ok=True)
open(out + '/model/cuda/mma_common.cuh', 'w').write(h)

def split_top(args):
    """Split at commas outside (), <> and []."""
    out, depth, cur = [], 0, ''
    for ch in args:
        if ch in '(<[': depth += 1
        elif ch in ')>]': depth -= 1
        if ch == ',' and depth == 0:
            out.append(cur.strip()); cur = ''
        else:
            cur += ch
    out.append(cur.strip())
    return out

def rewrite_launches(s):
    """name<...><<<grid, block, smem, stream>>>(args); -> emu_run_grid(...)"""
    while '<<<' in s:
        i = s.index('<<<')
        j = i  # walk back over the template argument list and the name
        if s[j - 1] == '>':
            depth = 0
            while True:
                j -= 1
                if s[j] == '>': depth += 1
                elif s[j] == '<':
                    depth -= 1
                    if depth == 0: break
        while s[j - 1].isalnum() or s[j - 1] == '_': j -= 1
        name = s[j:i]
        k = s.index('>>>', i)
        cfg = split_top(s[i + 3:k])
        assert len(cfg) == 4, cfg
        assert s[k + 3] == '('
        e = s.index(');', k)
        call = s[k + 3:e + 1]
        s = s[:j] + 'emu_run_grid(dim3(%s), dim3(%s), %s, [&]() { %s%s; })' % (cfg[0], cfg[1], cfg[2], name, call) + s[e + 1:]
    return s

for f in ['attention_fwd.cu', 'attention_bwd.cu', 'attention_host.cu']:
    s = open(repo + '/model/cuda/' + f).read()
    s = s.replace('extern __shared__ __align__(16) unsigned char smem_raw[];', 'unsigned char *smem_raw = emu_smem();')
    s = rewrite_launches(s)
    assert '<<<' not in s, f
    open(out + '/model/cuda/' + f.replace('.cu', '.cpp'), 'w').write(s)
