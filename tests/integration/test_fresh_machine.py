"""README's first commands on a machine that is not ours: Debian 13 (python3 3.13, no 3.11).

scripts/fresh-machine.sh debootstraps the root (cached by its inputs, as the images' base is),
enters it as a chroot in its own mount and UTS namespace whose host name does not resolve, and
runs git clone, make demo and the whole fast suite there (argparse's wording and stdout's
buffering differ on 3.13.5), timing each step; the timings land in the test's output.
It runs only where ENVKIT_FRESH=1: CI (.ci/run) runs it beside the suite, as it is mostly copies and downloads.
What it costs: the first run debootstraps (a few minutes) and every run makes the venv, whose
torch for Python 3.13 is downloaded (the other wheels come from this host's uv cache). Needs
root, debootstrap and unshare; skips without them, and fails instead under ENVKIT_REQUIRE_FRESH=1 (CI).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from xla_env import environment_missing

pytestmark = pytest.mark.slow


@pytest.mark.skipif(os.environ.get("ENVKIT_FRESH") != "1", reason="set ENVKIT_FRESH=1 to run it (a 5.8 GB venv)")
def test_a_fresh_debian_13_runs_the_demo_and_the_tests(repo_root):
    missing = [tool for tool in ("debootstrap", "unshare", "chroot") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        environment_missing(f"needs root and {', '.join(missing) or 'root'}", "ENVKIT_REQUIRE_FRESH")
    done = subprocess.run(
        [str(repo_root / "scripts" / "fresh-machine.sh"), str(repo_root)],  # every fast test runs there
        capture_output=True,
        text=True,
        timeout=3600,
    )
    # The figures first (the steps' times, the Pythons, the venv's size), then the tail: they are read from this log.
    print(*re.findall(r"^(?:step|venv|python3): .*$", done.stdout, re.MULTILINE), sep="\n")
    print(done.stdout[-4000:])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"^python3: Python 3\.13\.\d+; python3\.11: none$", done.stdout, re.MULTILINE)
    steps = dict(re.findall(r"^step: (\w+) ([0-9.]+) s$", done.stdout, re.MULTILINE))
    assert list(steps) == ["root", "clone", "demo", "test"]
    assert re.search(r"^venv: \S+$", done.stdout, re.MULTILINE)
    assert re.search(r"^=+ \d+ passed", done.stdout, re.MULTILINE)
    # the demo's DDP run on a host whose name does not resolve: its record, not two rendezvous timeouts
    assert "| cpu DDP×2 |" in done.stdout
