"""README's two commands on a machine that is not ours, as a user has it: Debian 13 (python3 3.13, no 3.11).

scripts/fresh-machine.sh debootstraps a root with README's prerequisites alone (cached by its inputs, as the
images' base is), enters it as a chroot in its own mount and UTS namespace whose host name does not resolve, and
there, as an ordinary user made with useradd, runs git clone, `make demo` and `make test` (argparse's wording and
stdout's buffering differ on 3.13.5), timing each step; the tests that need what README does not install (Docker,
Slurm, the XLA environment, the browsers, root's network namespaces) skip there with their reason.
Its output ends with both commands' times and exit status, the test counts and the disk the root took: the closing
lines of CI's log. It runs only where ENVKIT_FRESH=1: CI (.ci/run) runs it beside the suite.
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
        [str(repo_root / "scripts" / "fresh-machine.sh"), str(repo_root)],  # README's make test: the whole suite
        capture_output=True,
        text=True,
        timeout=3600,
    )
    figures = re.findall(r"^(?:step|venv|python3|disk): .*$", done.stdout, re.MULTILINE)
    steps = dict(re.findall(r"^step: (\w+) ([0-9.]+ s \(exit \d+\))$", done.stdout, re.MULTILINE))
    counts = re.findall(r"^=+ (\d+ (?:passed|failed).*?) in [0-9.]+s", done.stdout, re.MULTILINE)
    # The tail, then the figures: the closing lines of CI's log (.ci/run prints this test's output last).
    print(done.stdout[-4000:], *figures, sep="\n")
    print(
        f"fresh Debian 13, as an ordinary user: make demo {steps.get('demo', 'not run')}; "
        f"make test {steps.get('test', 'not run')}: {'; '.join(counts) or 'no test counts'}"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"^python3: Python 3\.13\.\d+; python3\.11: none$", done.stdout, re.MULTILINE)
    assert list(steps) == ["root", "clone", "demo", "test"] and all(
        step.endswith("(exit 0)") for step in steps.values()
    )
    assert re.search(r"^venv: \S+$", done.stdout, re.MULTILINE) and counts
    # the demo's DDP run on a host whose name does not resolve: its record, not two rendezvous timeouts
    assert "| cpu DDP×2 |" in done.stdout
