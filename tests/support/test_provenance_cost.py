"""What the run wrapper costs around the program (issue 32 §6): benchmarks/bench_wrapper.py gives the figures;
these tests hold the causes away."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from envkit.support import provenance, provenance_facts

WRAPPER = Path(provenance.__file__)


def test_the_distributions_are_importlib_metadatas_without_its_email_parser(tmp_path):
    """importlib.metadata parsed every METADATA whole (0.75 s after each run for 290 distributions)."""
    probe = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import provenance_facts as provenance; "
        "print(json.dumps([provenance.distributions(), provenance._version('torch'), 'email.parser' in sys.modules]))"
    )
    # From an empty folder: `python -c` puts its working directory first on sys.path, and a checkout's build
    # leftovers there (an *.egg-info of a wheel built in place) are distributions to it but not to this process.
    done = subprocess.run(
        [sys.executable, "-c", probe, str(WRAPPER.parent)], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    found, torch, parsed = json.loads(done.stdout)
    first = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            first.setdefault(provenance_facts.re.sub(r"[-_.]+", "-", name).lower(), dist.version)
    assert found == sorted(f"{name}=={version}" for name, version in first.items())
    assert torch == metadata.version("torch") and not parsed


def test_the_record_says_the_programs_cpu_time_and_the_hosts_load_beside_its_wall_time(tmp_path):
    """On a busy host the wall time grows and the CPU time does not: the record keeps both, and the load."""
    env = {"PATH": os.environ["PATH"], "ENVKIT_RESULTS_DIR": str(tmp_path / "results")}
    work = "total = 0\nfor number in range(3_000_000):\n    total += number\n"
    subprocess.run([sys.executable, str(WRAPPER), sys.executable, "-c", work], cwd=tmp_path, env=env, check=True)
    (path,) = (tmp_path / "results").glob("*.json")
    run = json.loads(path.read_text())["run"]
    assert run["cpu_time_s"] > 0 and len(run["load_average"]) == 2
    assert all(load >= 0 for load in run["load_average"])


def test_the_wrapper_starts_a_run_without_inspect_its_tokenizer_uuid_datetime_or_socket(tmp_path):
    """Issue 42 goal 2: inspect.getsource (inspect and its tokenizer's regexes), uuid and datetime were 40-75 ms of
    the wrapper's start, each run, socket (for the host's name) about 10 ms more, and platform (for the Python
    version: its import compiles nine patterns) a few ms; the hook it writes is the device hook's source as inspect
    gives it."""
    import inspect

    from envkit.support import provenance_device

    probe = (
        "import json, runpy, sys; sys.argv = sys.argv[1:]\n"
        "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted({'inspect', 'tokenize', 'uuid', 'datetime', 'socket', 'platform'} & set(sys.modules))))"
    )
    env = {"PATH": os.environ["PATH"], "ENVKIT_RESULTS_DIR": str(tmp_path / "results")}
    done = subprocess.run(
        [sys.executable, "-I", "-c", probe, str(WRAPPER), sys.executable, "-c", "pass"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=True,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == []
    (record,) = (tmp_path / "results").glob("*.json")
    run = json.loads(record.read_text())["run"]
    assert len(run["run_id"]) == 32 and int(run["run_id"], 16) >= 0 and run["started_at"].endswith("+00:00")
    assert run["wrapper"]["host"] == socket.gethostname()
    assert json.loads(record.read_text())["environment"]["python"] == platform.python_version()
    assert provenance_device._source(provenance_device.device_hook) == inspect.getsource(provenance_device.device_hook)
