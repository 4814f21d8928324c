"""What the Python end-to-end tests share: the list of failed checks each script reports at its
end, check(), and a runner for the gdn binary under test. The scripts import it from their own
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
