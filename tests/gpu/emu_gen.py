# Writes host-C++ copies of model/cuda sources (the ops and the model's host code; the attention
# kernels go through tests/gpu/emu/gen.py) for the CPU emulator of tests/gpu/emu (see
# emu_attn.sh): each kernel<<<grid, block, smem, stream>>>(args) launch becomes a call that runs
# the grid, the dynamic shared memory a pointer to the block's emulated shared memory, and a
# fixed __shared__ array a static one (blocks run one after another), and each file starts with
# emu_shim.h. Everything else is the source as it is.
# Usage: emu_gen.py REPO_ROOT OUT_DIR FILE.cu...  (writes OUT_DIR/model/cuda/FILE.cpp)
import os
import re
import sys

repo, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]


def split_top(args):
    """Split at commas outside () and [] (a launch configuration's template arguments sit in
    parentheses' arguments, and its < and > may be comparisons or ->)."""
    parts, depth, cur = [], 0, ''
    for ch in args:
        if ch in '([':
            depth += 1
        elif ch in ')]':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur.strip())
            cur = ''
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


def rewrite_launches(s):
    """name<...><<<grid, block, smem, stream>>>(args) -> emu_run_grid(...), args matched by parentheses."""
    while '<<<' in s:
        i = s.index('<<<')
        j = i  # back over the template argument list and the name
        if s[j - 1] == '>':
            depth = 0
            while True:
                j -= 1
                if s[j] == '>':
                    depth += 1
                elif s[j] == '<':
                    depth -= 1
                    if depth == 0:
                        break
        while s[j - 1].isalnum() or s[j - 1] in '_.[]':  # a name, or a member such as v[i].kernel
            j -= 1
        name = s[j:i]
        k = s.index('>>>', i)
        cfg = split_top(s[i + 3:k])
        cfg += ['0'] * (4 - len(cfg))  # <<<grid, block>>>: no dynamic shared memory, stream 0
        assert len(cfg) == 4, cfg
        assert s[k + 3] == '('
        depth, e = 0, k + 3
        while True:
            if s[e] == '(':
                depth += 1
            elif s[e] == ')':
                depth -= 1
                if depth == 0:
                    break
            e += 1
        call = s[k + 3:e + 1]
        s = s[:j] + 'emu_run_grid(dim3(%s), dim3(%s), %s, [&]() { %s%s; })' % (cfg[0], cfg[1], cfg[2], name, call) + s[e + 1:]
    return s


os.makedirs(out + '/model/cuda', exist_ok=True)
for f in files:
    s = open(repo + '/model/cuda/' + f).read()
    # ops_act.cu names its launch configuration with a macro: written out first
    act = '<<<ops_grid((n), ACT_THREADS), ACT_THREADS, 0, OPS_STREAM(stream)>>>'
    s = s.replace('#define ACT_LAUNCH(n) ' + act, '')
    s = s.replace(' ACT_LAUNCH((n) / 8)', act.replace('(n)', '(n) / 8'))
    s = s.replace(' ACT_LAUNCH(n)', act)
    s = re.sub(r'extern __shared__ (?:__align__\(\d+\) )?(\w+(?: \w+)?) (\w+)\[\];', r'\1 *\2 = (\1 *)emu_smem();', s)
    s = s.replace('__shared__ ', 'static ')
    s = rewrite_launches(s)
    assert '<<<' not in s, f
    open(out + '/model/cuda/' + f.replace('.cu', '.cpp'), 'w').write('#include "tests/gpu/emu_shim.h"\n' + s)
