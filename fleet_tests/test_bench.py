"""The benchmarks' own measurement (bench/util.py): peak RSS is the measured command's, not the bench's."""
import json
import subprocess
import sys

from fleet_tests.conftest import ROOT


def test_peak_rss_is_the_commands_own_not_the_floor_of_a_big_parent():
    # The parent holds 160 MB when it starts a command that peaks at about 40 MB. ru_maxrss of that child is
    # floored at the parent's 160 MB; the sampled VmHWM is the child's own. (Kept well under 300 MB: every
    # process a test starts counts in pytest's RUSAGE_CHILDREN, which test_publish's 1 GiB test bounds.)
    code = (
        "import json\n"
        "from bench.util import run_measured\n"
        "ballast = bytearray(160 << 20)\n"
        "for i in range(0, len(ballast), 4096): ballast[i] = 1\n"
        "child = 'import time; b = bytearray(40 << 20)\\nfor i in range(0, len(b), 4096): b[i] = 1\\ntime.sleep(1)'\n"
        "r = run_measured([__import__('sys').executable, '-c', child])\n"
        "print(json.dumps({'peak': r['peak_rss_mb'], 'ru': r['ru_maxrss_mb']}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["ru"] >= 160, r  # the floor the sampler exists for
    assert 40 <= r["peak"] < 100, r
