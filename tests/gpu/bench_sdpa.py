#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention (causal, bf16) at bench_attention's shapes: forward and
forward+backward, median of repeats timed with CUDA events after warm-up, on the machine's GPU.
The reference the CUDA attention kernels are compared with; tests/gpu/run.sh runs it right after
bench_attention so both come from one call. Exit 77 where torch or a GPU is missing.
Usage: bench_sdpa.py [repeats]"""
import statistics
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: no CUDA device")
    sys.exit(77)

repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 20
if repeats < 1:
    sys.exit("bench_sdpa: repeats must be >= 1")
SHAPES = [(4, 4096, 16, 16, 128), (2, 16384, 16, 16, 128), (4, 4096, 16, 4, 128), (4, 4096, 16, 16, 64)]


def timed(fn, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


print(f"causal attention, torch {torch.__version__} SDPA bf16, {torch.cuda.get_device_name()}, "
      f"median of {repeats} after 3 warm-up")
print(f"{'shape':<26} {'fwd ms':>9} {'f+b ms':>9}")
for B, T, H, Hkv, D in SHAPES:
    # SDPA's layout is [B, heads, T, D]; grouped kv heads through enable_gqa
    q = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, Hkv, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, Hkv, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    do = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
    gqa = Hkv != H

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

    def fwdbwd():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        o.backward(do)

    print(f"{f'B{B} T{T} H{H} Hkv{Hkv} D{D}':<26} {timed(fwd):9.3f} {timed(fwdbwd):9.3f}")
    del q, k, v, do
    torch.cuda.empty_cache()
