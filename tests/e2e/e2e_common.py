"""What the Python end-to-end tests share: the list of failed checks each script reports at its
end, check(), a runner for the gdn binary under test, one that stops the script when a command
fails, and a checkpoint's tensors. The scripts import it from their own
folder (op_common.py builds on it)."""
import subprocess
import sys

failures = []  # what failed, in order; a script exits 1 when it is not empty


def check(cond, what):
    """Records (and prints) a failed check; the script goes on to report the others."""
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def gdn_runner(gdn):
    """run(*args): gdn ARGS, its output captured as text."""
    return lambda *args: subprocess.run([gdn, *args], capture_output=True, text=True)


def gdn_must(run):
    """must(*args): run(*args), stopping the script with gdn's output when it fails."""
    def must(*args):
        r = run(*args)
        if r.returncode != 0:
            sys.exit(f"FAIL: gdn {' '.join(args)}: {r.stdout[-800:]} {r.stderr[-1500:]}")
        return r
    return must


def tensors(path):
    """The /params tensors of a checkpoint (h5py), by name."""
    import h5py
    with h5py.File(path, "r") as f:
        return {k: f["params"][k][()] for k in f["params"].keys()}


def finish(name, detail=""):
    """Ends the script: exit 1 saying how many checks failed, else a line that NAME passed
    (with detail after it)."""
    if failures:
        print(f"{name}: {len(failures)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print(f"{name}: all checks passed{detail}")
