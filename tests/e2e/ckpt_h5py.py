#!/usr/bin/env python3
"""Opens a gdn checkpoint with plain h5py and checks it against the C side.

ckpt_stress writes a small file with known values; `inspect --json` reports what the C library
reads. Here h5py must find: the format attributes as str/int, the groups, every tensor's shape,
dtype and zlib crc32, L2 norms equal to the C ones (1e-6 relative), the exact known values,
the model config and the /state values, and the metadata checksums recomputed from their
definition (io/ckpt_meta.c). A copy with one edited attribute must fail inspect, naming it. A copy with one flipped data byte must then fail both
inspect (naming the tensor) and the h5py crc check.
Usage: ckpt_h5py.py CKPT_STRESS
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zlib

import h5py
import numpy as np


def fail(msg):
    print("ckpt_h5py: FAILED: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def meta_checksums(f):
    """meta_checksums as defined in io/ckpt_meta.c, from what h5py reads."""
    def value_bytes(v):
        if isinstance(v, (str, bytes)):
            return v.encode() if isinstance(v, str) else v
        if isinstance(v, (np.floating, float)):
            return np.float64(v).astype("<f8").tobytes()
        return np.int64(v).astype("<i8").tobytes()
    items = {}
    for prefix, obj in (("", f), ("model_config/", f["model_config"]), ("state/", f["state"])):
        for k, v in obj.attrs.items():
            if prefix == "" and k in ("meta_checksums", "meta_crc32"):
                continue
            items[prefix + k] = value_bytes(v)
    items["state/rng"] = f["state/rng"][()].astype("<u8").tobytes()
    crc = {n: zlib.crc32(n.encode() + b"\0" + v) for n, v in items.items()}
    return "".join(f"{n} {crc[n]:08x}\n" for n in sorted(items, key=lambda n: n.encode()))


def inspect(stress, path):
    r = subprocess.run([stress, "inspect", "--json", path], capture_output=True, text=True)
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else None, r.stderr


def main():
    stress = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "known.h5")
        subprocess.run([stress, "known", path], check=True)
        rc, rep, err = inspect(stress, path)
        check(rc == 0 and rep["ok"], f"inspect failed on a good file: {err}")

        with h5py.File(path, "r") as f:
            a = f.attrs
            check(isinstance(a["format"], str) and a["format"] == "gdn-checkpoint",
                  f"format attribute {a['format']!r} is not the str 'gdn-checkpoint'")
            check(a["format_version"] == 2 and a["format_version"].dtype == np.int64, "format_version")
            check(a["step"] == rep["step"] == 12, "step")
            check(a["tokens_seen"] == rep["tokens_seen"] == 12 * 4096, "tokens_seen")
            check(isinstance(a["config"], str), "config is not a str")
            cfg = json.loads(a["config"])
            check(cfg == json.loads(rep["config"]) and cfg["name"] == "known \u00e9", "config JSON")
            check(set(f.keys()) == {"model_config", "params", "optim", "state"}, f"groups {list(f.keys())}")
            mine = meta_checksums(f)
            check(a["meta_checksums"] == mine, f"meta_checksums: file {a['meta_checksums']!r} vs h5py {mine!r}")
            check(a["meta_crc32"] == zlib.crc32(mine.encode()), "meta_crc32")
            check(set(f["optim"].keys()) == {"m", "v"}, "optim groups")

            mc = f["model_config"].attrs
            check(set(mc.keys()) == set(rep["model"].keys()), "model_config fields")
            for k, v in rep["model"].items():
                check(mc[k] == v, f"model_config {k}: h5py {mc[k]} vs C {v}")
            check(mc["d_model"] == 16 and mc["norm_eps"].dtype == np.float64, "model_config types")

            st = f["state"]
            check(st["rng"].dtype == np.uint64 and list(st["rng"][()]) == rep["rng"], "state/rng")
            check(dict(st.attrs) == rep["state"], f"state attrs {dict(st.attrs)} vs {rep['state']}")
            check(st.attrs["data_position"] == 12000 and st.attrs["schedule_step"] == 12, "state values")

            datasets = []
            f.visititems(lambda n, o: datasets.append(n) if isinstance(o, h5py.Dataset) else None)
            tensors = rep["tensors"]
            check(len(tensors) == len(datasets) - 1, f"{len(tensors)} tensors vs {len(datasets)} datasets")
            n_params = sum(1 for t in tensors if t["name"].startswith("params/"))
            check(n_params * 3 == len(tensors), "params/m/v tensor counts differ")
            for i, t in enumerate(tensors):
                ds = f[t["name"]]
                x = ds[()]
                check(x.dtype == np.dtype("<f4"), f"{t['name']}: dtype {x.dtype}")
                check(list(x.shape) == t["shape"], f"{t['name']}: shape {x.shape} vs {t['shape']}")
                crc = zlib.crc32(x.tobytes())
                check(ds.attrs["crc32"] == crc == t["crc32"], f"{t['name']}: crc32")
                norm = float(np.sqrt(np.sum(x.astype(np.float64) ** 2)))
                check(abs(norm - t["l2"]) <= 1e-6 * max(norm, 1e-30),
                      f"{t['name']}: L2 h5py {norm!r} vs C {t['l2']!r}")
                # The values ckpt_stress wrote: tensor k (table order), element j.
                k = i % n_params
                j = np.arange(x.size, dtype=np.int64)
                p = (((7 * j + 3 * k) % 101) - 50).astype(np.float32) / np.float32(64)
                want = {"params": p, "optim/m": p / 2, "optim/v": p * p}[t["name"].rsplit("/", 1)[0]]
                check(np.array_equal(x.reshape(-1), want), f"{t['name']}: values differ")

            # One flipped byte inside a tensor's data: C names it, h5py's crc disagrees.
            victim = tensors[len(tensors) // 2]["name"]
            offset = f[victim].id.get_offset() + 5
        bad = os.path.join(d, "bad.h5")
        shutil.copy(path, bad)
        with open(bad, "r+b") as fh:
            fh.seek(offset)
            b = fh.read(1)
            fh.seek(offset)
            fh.write(bytes([b[0] ^ 0x10]))
        rc, rep2, err = inspect(stress, bad)
        check(rc == 1 and not rep2["ok"], "inspect accepted a damaged file")
        check(f"checksum mismatch in {victim}" in err, f"inspect did not name {victim}: {err}")
        check([t["name"] for t in rep2["tensors"] if t["status"] != "ok"] == [victim], "MISMATCH rows")
        with h5py.File(bad, "r") as f:
            check(zlib.crc32(f[victim][()].tobytes()) != f[victim].attrs["crc32"], "h5py crc32 missed the flip")
        # An attribute edited with h5py: inspect names it and exits 1.
        for obj, name, value in (("/", "step", np.int64(13)), ("/state", "data_position", np.int64(5)),
                                 ("/model_config", "d_ff", np.int64(64))):
            shutil.copy(path, bad)
            with h5py.File(bad, "r+") as f:
                f[obj].attrs[name] = value
            rc, rep3, err = inspect(stress, bad)
            item = (obj.strip("/") + "/" if obj != "/" else "") + name
            check(rc == 1 and f"metadata checksum mismatch in {item}" in err, f"edit of {item}: {err}")
    print(f"ckpt_h5py: {len(tensors)} tensors checked with h5py {h5py.__version__} "
          f"(HDF5 {h5py.version.hdf5_version}); damaged copy rejected, {victim} named")


if __name__ == "__main__":
    main()
