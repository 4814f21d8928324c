"""One line per kernel from an `ncu --page raw --csv` report: time, throughputs (percent of
peak), achieved occupancy, and the largest warp-stall reasons (cycles per issued instruction)."""
import csv
import sys

rows = list(csv.reader(open(sys.argv[1], newline="")))
start = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
if start is None:
    print("no ncu data:", " ".join(" ".join(r) for r in rows[:5])[:500])
    sys.exit(0)
head, data = rows[start], rows[start + 2:]
col = {name: i for i, name in enumerate(head)}

def get(r, name):
    i = col.get(name)
    return r[i] if i is not None and i < len(r) else "?"

want = [
    ("us", "gpu__time_duration.sum"),
    ("sm%", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("dram%", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    ("l2%", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("l1%", "l1tex__throughput.avg.pct_of_peak_sustained_active"),
    ("occ%", "sm__warps_active.avg.pct_of_peak_sustained_active"),
    ("tensor%", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("ipc", "sm__inst_executed.avg.per_cycle_active"),
]
stall_cols = [n for n in head if n.startswith("smsp__average_warp_latency_issue_stalled_")
              and n.endswith(".ratio")]
if not stall_cols:
    stall_cols = [n for n in head if "issue_stalled" in n and n.endswith(".ratio")]
for r in data:
    name = get(r, "Kernel Name").split("(")[0]
    vals = " ".join(f"{k}={get(r, m)}" for k, m in want)
    st = []
    for n in stall_cols:
        try:
            st.append((float(get(r, n).replace(",", "")), n))
        except ValueError:
            pass
    st.sort(reverse=True)
    top = " ".join(f"{n.split('stalled_')[1].split('_per')[0]}={v:.1f}" for v, n in st[:5])
    print(f"{name[:34]:34s} {vals} | {top}")
