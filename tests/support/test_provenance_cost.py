"""What the run wrapper costs around the program (issue 32 §6): benchmarks/bench_wrapper.py gives the figures;
these tests hold the causes away."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from envkit.support import provenance

WRAPPER = Path(provenance.__file__)


def test_the_distributions_are_importlib_metadatas_without_its_email_parser():
    """importlib.metadata parsed every METADATA whole (0.75 s after each run for 290 distributions)."""
    probe = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import provenance; "
        "print(json.dumps([provenance.distributions(), provenance._version('torch'), 'email.parser' in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(WRAPPER.parent)], capture_output=True, text=True, check=True
    )
    found, torch, parsed = json.loads(done.stdout)
    first = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            first.setdefault(provenance.re.sub(r"[-_.]+", "-", name).lower(), dist.version)
    assert found == sorted(f"{name}=={version}" for name, version in first.items())
    assert torch == metadata.version("torch") and not parsed
