"""envkit's run wrapper: the process's facts, where the run ran (issue 31 §3: the one owner of a run's environment).

One of the files that ship together as envkit_run.py (provenance.py's SHIPPED): standard library only, found without
importing the command's libraries. The host, Python, image, lock, git state and distributions are filled here; the
recipes' harness adds only what needs torch. Run as a script by another interpreter (``python provenance_facts.py``),
it prints that interpreter's facts as JSON: the run's versions are those of the Python that ran torch.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

try:  # in envkit: modules of envkit.support
    from . import provenance_records as records
except ImportError:  # run as a script (envkit_run.py, shipped): its modules are beside it, even under python -P
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import provenance_records as records

DEVICE_VARIABLE = "ENVKIT_DEVICE"
# The venv marker envkit venv writes (envkit/host/venv.py), which names the lock it installed.
VENV_LOCK_MARKER = "envkit-lock.json"
# The lock an environment with ENVKIT_LOCK_SHA256 was installed from, where it is not requirements.lock beside the
# wrapper (as in an image): a notebook's, which in CPU mode is the wheelhouse's.
LOCK_FILE_VARIABLE = "ENVKIT_LOCK_FILE"
# The results schema's patterns (tests/support/test_provenance.py holds them equal): a value that is none is null.
_SHA256 = r"^[0-9a-f]{64}$"
_REVISION = r"^[0-9a-f]{7,64}$"
_DIGEST = r"^sha256:[0-9a-f]{64}$"


def environment() -> dict:
    """Where the run ran, found without importing the command's libraries."""
    known = known_at_once()
    revision, dirty = git_state()
    return {
        **known,
        "device_name": device_name(known["device_type"]),
        "torch": _version("torch"),
        "torch_xla": _version("torch_xla"),
        "torch_tpu": _version("torch-tpu"),
        "git_revision": revision,
        "git_dirty": dirty,
        "distributions": distributions(),
    }


def known_at_once() -> dict:
    """What the record of a run's start says of where it runs: what needs no command, no scan of the installed
    packages, no import (the rest is null until the run ends)."""
    return {
        "host": host(),
        "device_type": os.environ.get(DEVICE_VARIABLE) or None,
        "device_name": None,
        "python": python_version(),
        "torch": None,
        "torch_xla": None,
        "image": os.environ.get("ENVKIT_IMAGE") or None,
        "image_id": os.environ.get("ENVKIT_IMAGE_ID") or None,
        "image_digest": _matching(_DIGEST, os.environ.get("ENVKIT_IMAGE_DIGEST", "")),
        "lock_sha256": lock_sha256(),
    }


def host() -> str:
    """This host's name, as socket.gethostname() gives it (the kernel's node name), without importing socket: its
    enums cost the wrapper's start about 10 ms (issue 42)."""
    return os.uname().nodename


def python_version() -> str:
    """platform.python_version(): the first word of sys.version (3.11.7, 3.13.0rc1), read without importing
    platform, whose import compiles nine patterns (a few ms of every run's start: issue 42)."""
    return sys.version.split(" ", 1)[0]


def device_label() -> str | None:
    """The device the run's target promises: ENVKIT_TARGET_DEVICE where a stand-in is told another, else
    ENVKIT_DEVICE."""
    return os.environ.get(records.TARGET_DEVICE_VARIABLE) or os.environ.get(DEVICE_VARIABLE) or None


def device_name(device: str | None) -> str | None:
    """The accelerator's name: nvidia-smi's first GPU, the TPU VM's accelerator type, else the CPU's model."""
    if device == "cuda":
        return ((_output("nvidia-smi", "--query-gpu=name", "--format=csv,noheader") or "").splitlines() or [None])[0]
    if device == "tpu":
        return os.environ.get("TPU_ACCELERATOR_TYPE") or os.environ.get("ACCELERATOR_TYPE") or None
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform  # its import compiles nine patterns: only where /proc/cpuinfo names no model (macOS, Arm)

    return platform.processor() or None


def lock_sha256() -> str | None:
    """The lock the packages came from: the image's or notebook's ENVKIT_LOCK_SHA256, else the venv's marker."""
    sha = os.environ.get("ENVKIT_LOCK_SHA256", "")
    if not sha:
        try:
            marker = records.parse_json(records.read_regular(Path(sys.prefix, VENV_LOCK_MARKER)))
        except (OSError, records.Unreadable):
            return None
        sha = marker.get("lock_sha256", "") if isinstance(marker, dict) else ""
    return _matching(_SHA256, sha)


def _matching(pattern: str, value: object) -> str | None:
    return value if isinstance(value, str) and re.match(pattern, value) else None


def git_state() -> tuple[str | None, bool | None]:
    """The project's commit and whether its tracked files differ from it (None: not known, e.g. in an image)."""
    revision = os.environ.get("ENVKIT_REVISION", "").strip()
    if revision:
        return _matching(_REVISION, revision), None
    # One git, not two (rev-parse, then status): its commit is the branch.oid header line, a changed file any other.
    status = _output("git", "status", "--porcelain=v2", "--branch", "--untracked-files=no")
    lines = (status or "").splitlines()
    head = _matching(_REVISION, next((line.split()[-1] for line in lines if line.startswith("# branch.oid ")), None))
    return (head, any(not line.startswith("#") for line in lines)) if head else (None, None)


def _output(*argv: str) -> str | None:
    """A tool's output, stripped; None where it is missing, fails or takes more than 30 s."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _version(distribution: str) -> str | None:
    return installed().get(re.sub(r"[-_.]+", "-", distribution).lower())


def distributions() -> list[str]:
    """name==version of every distribution this interpreter has, sorted, with PEP 503 names: the results
    schema's form, which `envkit report` validates (every record's, a seed recipe's included: the wrapper alone
    writes it)."""
    return sorted(f"{name}=={version}" for name, version in installed().items())


_INSTALLED: dict[str, str] = {}


def installed() -> dict[str, str]:
    """PEP 503 name -> version of each distribution this interpreter imports (the first on sys.path wins).

    Read from each METADATA's header alone, by a scan of sys.path: importlib.metadata costs 0.1 s to import
    and parses the whole file (descriptions of 100 KB) with the email parser on every call: 0.75 s after each
    run for 290 distributions, where this takes 0.03 s (benchmarks/bench_wrapper.py)."""
    if not _INSTALLED:
        for entry in sys.path:
            try:
                names = sorted(os.listdir(entry or "."))
            except OSError:  # a zip file, a folder that is gone
                continue
            for name in names:
                if name.endswith((".dist-info", ".egg-info")):
                    _add_distribution(Path(entry or ".", name))
    return _INSTALLED


def _add_distribution(path: Path) -> None:
    for metadata in (path / "METADATA", path / "PKG-INFO", path):
        try:
            with metadata.open(encoding="utf-8", errors="replace") as handle:
                header = "".join(itertools.takewhile(str.strip, itertools.islice(handle, 500)))  # to a blank line
        except OSError:  # not there, or a folder
            continue
        fields = dict(re.findall(_HEADER, header))
        if fields.get("Name") and fields.get("Version"):
            _INSTALLED.setdefault(re.sub(r"[-_.]+", "-", fields["Name"]).lower(), fields["Version"])
        return


_HEADER = r"(?m)^(Name|Version):[ \t]*(\S+)[ \t]*$"


def interpreter_facts() -> dict:
    """This interpreter's versions, distributions and lock, and how its packages differ from that lock."""
    return {
        "python": python_version(),
        **{field: _version(name) for field, name in (("torch", "torch"), ("torch_xla", "torch_xla"))},
        "torch_tpu": _version("torch-tpu"),
        "lock_sha256": lock_sha256(),
        "distributions": distributions(),
        "lock_drift": lock_drift(),
    }


def facts_of(device: dict) -> dict:
    """interpreter_facts() of the interpreter that ran the command: this one, else asked of the other one."""
    other = device.get("interpreter")
    if not other:
        return interpreter_facts()
    try:
        done = subprocess.run(
            [other, os.path.abspath(__file__)],  # this file as a script: its facts as JSON
            capture_output=True,
            timeout=120,
        )
        facts = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {"lock_drift": [f"{other}'s versions could not be read: the record's are {sys.executable}'s"]}
    return facts if isinstance(facts, dict) else {}


def lock_drift() -> list[str]:
    """How the packages here differ from the lock they were installed from (an image's, a venv's marker's)."""
    sha = lock_sha256()
    # an image's lock is beside the wrapper; a notebook names the one it installed (in CPU mode the wheelhouse's)
    beside = os.environ.get(LOCK_FILE_VARIABLE) or Path(__file__).with_name("requirements.lock")
    path = Path(beside) if os.environ.get("ENVKIT_LOCK_SHA256") else None
    try:
        if path is None and sha:
            path = Path(records.parse_json(records.read_regular(Path(sys.prefix, VENV_LOCK_MARKER)))["lock"])
        text = path.read_bytes() if path else None
    except (OSError, ValueError, KeyError, TypeError):
        text = None
    if not sha or text is None:
        return []
    if hashlib.sha256(text).hexdigest() != sha:
        return [f"{path} is no longer the lock this environment was installed from (sha256 {sha[:12]}): remake it"]
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)\s*\\?$", text.decode("utf-8", "replace"), re.M)
    found = installed()
    drift = [
        f"{name} {found.get(key) or 'missing'} (locked {version})"
        for name, version in pins
        if found.get(key := re.sub(r"[-_.]+", "-", name).lower()) != version
    ]
    more = f" and {len(drift) - 5} more" if len(drift) > 5 else ""
    return [f"the packages that ran differ from the lock {path}: {', '.join(drift[:5])}{more}"] if drift else []


# What sets a CPU library's threads in the program: OpenMP's (torch's intra-op pool), MKL's, OpenBLAS's, numexpr's.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def conditions(env: dict[str, str], reports: list[dict], wall: float, cpu_time: float) -> dict:
    """The conditions of the run's measurement (issue 40 §5): the thread budget the program got (``env``, the
    variables it ran with; torch's intra-op threads as its Python processes reported them at exit, ``reports``), the
    CPUs it may use (this process's affinity, which it inherits, under a container's CPU quota) and the share of
    them its CPU time took over the wall time: on a busy host, or one thread on two CPUs, well under 1."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cpu_quota()
    usable = min(cpus, quota) if quota is not None else cpus
    return {
        "thread_variables": {name: env.get(name) for name in THREAD_VARIABLES},
        "torch_threads": sorted({r["torch_threads"] for r in reports if isinstance(r.get("torch_threads"), int)}),
        "cpus": cpus,
        "cpu_quota": quota,
        "usable_cpus": usable,
        "cpu_share": round(cpu_time / (wall * usable), 3) if wall > 0 else None,
    }


def cpu_quota(proc: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPUs this process's cgroup and its parents allow (cgroup v2's cpu.max, v1's CFS quota over its period;
    docker run --cpus sets it), the smallest; None where none is set or none can be read."""
    try:
        lines = proc.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: one hierarchy
            limits += [_v2_limit(folder) for folder in _up_from(root / path.lstrip("/"), root)]
        elif "cpu" in controllers.split(","):
            top = root / "cpu"
            limits += [_v1_limit(folder) for folder in _up_from(top / path.lstrip("/"), top)]
    found = [limit for limit in limits if limit is not None]
    return round(min(found), 2) if found else None


def _up_from(folder: Path, top: Path) -> list[Path]:
    """``folder`` and its parents up to ``top``: a parent's limit holds for its children too."""
    return [folder, *(parent for parent in folder.parents if parent.is_relative_to(top))]


def _v2_limit(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text(encoding="utf-8").split()
        return int(quota) / int(period) if quota != "max" else None
    except (OSError, ValueError):
        return None


def _v1_limit(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text(encoding="utf-8"))
        period = int((folder / "cpu.cfs_period_us").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def truthful_environment(environment: dict, device: dict, facts: dict) -> dict:
    """The record's environment with the device the run used, where it was observed, instead of the label, and
    the versions of the interpreter that ran."""
    ran = {key: value for key, value in facts.items() if key in environment}
    if not device["observed"]:
        return {**environment, **ran}
    used = {"device_type": device["accelerator"], "device_name": device["name"], "device_count": device["count"]}
    return {**environment, **ran, **used}


if __name__ == "__main__":
    print(json.dumps(interpreter_facts()))


def wrapper() -> dict:
    """The wrapper that writes the run's record, as the report later tells whether it still runs (wrapper_state):
    its host, the host's boot and PID namespace, its pid and that process's start (a pid is reused)."""
    return {
        "host": host(),
        "boot_id": _first_line("/proc/sys/kernel/random/boot_id"),
        "pid_namespace": _link("/proc/self/ns/pid"),
        "pid": os.getpid(),
        "pid_started": _process_start(os.getpid()),
    }


def wrapper_state(recorded: object) -> str:
    """A record left "running": "running" (its wrapper is alive), "killed or lost" (on this host, boot and PID
    namespace no such process runs), else "running or lost" (another host, container or boot: not known here)."""
    here = wrapper()
    same = ("host", "boot_id", "pid_namespace")
    if not isinstance(recorded, dict) or any(recorded.get(key) != here[key] for key in same):
        return "running or lost"
    pid = recorded.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return "running or lost"
    if here["pid_started"] is not None:  # /proc: the very process, not another one given its pid since
        return "running" if _process_start(pid) == recorded.get("pid_started") else "killed or lost"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "killed or lost"
    except OSError:  # another user's: it exists
        pass
    return "running"


def _process_start(pid: int) -> int | None:
    """When the process started, in clock ticks since the boot (/proc/<pid>/stat's 22nd field); None: none, or no
    /proc."""
    stat = _first_line(f"/proc/{pid}/stat") or ""
    fields = stat.rpartition(")")[2].split()  # the command's name, in parentheses, may hold spaces
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def _first_line(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.readline().strip() or None
    except OSError:
        return None


def _link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None
