"""examples/python_prefill_decode.py runs as the README says and reports
every layer and every byte."""
import os
import subprocess
import sys

import pytest

import layercake as lc
from pd_peer import child_env

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python_prefill_decode.py")


@pytest.mark.parametrize("url", ["tcp://127.0.0.1:0", "shm://auto"])
def test_example_runs(url):
    if url.split(":")[0] not in lc.transports():
        pytest.skip(f"{url} not built in")
    r = subprocess.run([sys.executable, EXAMPLE, "--url", url], capture_output=True, text=True,
                       env=child_env(), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "D: 8 of 8 layers landed" in out or "D: room 42 SUCCESS" in out
    assert "D: every byte verified" in out and "metadata 'token=1234'" in out
    assert "P: room 42 SUCCESS" in out and out.rstrip().endswith("OK")
