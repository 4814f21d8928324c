"""One kernel instruction by instruction, from `ncu --page source --print-source sass --csv`:
instructions executed per opcode (share of all, share of the stall samples), the warp-stall
reasons over the whole kernel, and the instructions that gather the most samples."""
import collections
import csv
import re
import sys

rows = list(csv.reader(open(sys.argv[1], newline="")))
head_at = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
if head_at is None:
    print("no source counters:", " ".join(" ".join(r) for r in rows[:3])[:500])
    sys.exit(1)
kernel = rows[head_at - 1][1] if head_at > 0 and len(rows[head_at - 1]) > 1 else "?"
head, data = rows[head_at], [r for r in rows[head_at + 1:] if len(r) == len(rows[head_at])]
col = {name: i for i, name in enumerate(head)}
SAMPLES, SOURCE, EXEC = "Warp Stall Sampling (All Samples)", "Source", "Instructions Executed"
stalls = [n for n in head if n.startswith("stall_") and "Not Issued" not in n]


def num(r, name):
    try:
        return float(r[col[name]] or 0)
    except (KeyError, ValueError):
        return 0.0


def opcode(src):
    """HMMA for '@!P0 HMMA.16816.F32.BF16 R8, ...'."""
    return re.sub(r"^@!?U?P\w+\s+", "", src.strip()).split(" ")[0].split(".")[0]


total_exec = sum(num(r, EXEC) for r in data) or 1.0
total_samp = sum(num(r, SAMPLES) for r in data) or 1.0
print(f"{kernel}\n{len(data)} instructions, {total_exec:.0f} executed (warp level), "
      f"{total_samp:.0f} stall samples")
by_stall = collections.Counter()
for r in data:
    for s in stalls:
        by_stall[s] += num(r, s)
all_stalls = sum(by_stall.values()) or 1.0
print("stalls: " + ", ".join(f"{s[6:]} {100 * v / all_stalls:.1f}%" for s, v in by_stall.most_common(8)))
ex, sa = collections.Counter(), collections.Counter()
for r in data:
    op = opcode(r[col[SOURCE]])
    ex[op] += num(r, EXEC)
    sa[op] += num(r, SAMPLES)
print("opcode: % executed / % samples")
for op, v in ex.most_common(16):
    print(f"  {op:<10} {100 * v / total_exec:5.1f} {100 * sa[op] / total_samp:5.1f}")
print("busiest instructions: % samples, top stall, executed, source")
for r in sorted(data, key=lambda r: -num(r, SAMPLES))[:15]:
    top = max(stalls, key=lambda s: num(r, s)) if stalls else "?"
    print(f"  {100 * num(r, SAMPLES) / total_samp:5.2f} {top[6:]:<16} {num(r, EXEC):>10.0f}  {r[col[SOURCE]][:70]}")
