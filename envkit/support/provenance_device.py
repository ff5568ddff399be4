"""envkit's run wrapper: the device the run really used (issue 32 §3).

One of the files that ship together as envkit_run.py (provenance.py's SHIPPED): standard library only. Not the
target's label (ENVKIT_DEVICE) but what torch initialised in the run's Python processes: the wrapper puts a
sitecustomize on PYTHONPATH (it then runs the interpreter's own sitecustomize, if any) that writes, at each
process's exit, one report into ENVKIT_DEVICE_REPORTS.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

try:  # in envkit: modules of envkit.support
    from . import provenance_facts as facts
except ImportError:  # shipped: beside envkit_run.py, which put its folder on sys.path
    import provenance_facts as facts

DEVICE_REPORTS_VARIABLE = "ENVKIT_DEVICE_REPORTS"
DVCLIVE_VARIABLE = "ENVKIT_DVCLIVE_DIR"  # the absolute ./dvclive of the run, whose writes the hook reports
ACCELERATORS = {"cuda": "cuda", "tpu": "tpu"}  # a label (ENVKIT_DEVICE) that promises an accelerator


def device_hook() -> None:
    """Registers, in a Python process of the run, its report at exit: whether torch initialised CUDA (the devices
    that held memory, their names), the XLA runtime (its device type: TPU, or CPU for XLA:CPU) or TorchTPU.
    Copied alone into the sitecustomize: it uses nothing of this module, and asks nothing that would start
    a runtime the program did not start."""
    import atexit
    import os
    import sys

    folder = os.environ.get("ENVKIT_DEVICE_REPORTS")
    dvclive = os.environ.get("ENVKIT_DVCLIVE_DIR")
    wrote: list = []

    def audit(event: str, args: tuple) -> None:
        # whether this process opened a file under ./dvclive to write it: that folder is every run's in this working
        # directory, and only a run that wrote it takes its metrics (issue 39 §10). Cheap: one test per event.
        if event != "open" or wrote or len(args) != 3:
            return
        path, mode, flags = args
        writes = (
            any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & (os.O_WRONLY | os.O_RDWR))
        )
        if writes and isinstance(path, (str, bytes, os.PathLike)):
            if os.path.abspath(os.fsdecode(path)).startswith(dvclive + os.sep):
                wrote.append(True)

    def encoded(value) -> str:
        # The report as JSON without importing json: a program that never did (a bare Python loop) would pay for
        # json's, re's and enum's imports at its exit, about 8 ms of every run (issue 42). Its strings are quoted
        # by json's own C function.
        try:
            from _json import encode_basestring_ascii as quoted
        except ImportError:  # another Python than CPython
            from json import dumps as quoted

        if isinstance(value, bool) or value is None:
            return {True: "true", False: "false", None: "null"}[value]
        if isinstance(value, (int, float)):  # as json.dumps writes a number, non-finite floats included
            text = int.__repr__(value) if isinstance(value, int) else float.__repr__(value)
            return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(text, text)
        if isinstance(value, dict):
            return "{" + ", ".join(f"{quoted(str(key))}: {encoded(item)}" for key, item in value.items()) + "}"
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(encoded(item) for item in value) + "]"
        return quoted(str(value))

    def report() -> None:
        torch = getattr(sys.modules.get("torch"), "__version__", None)
        seen: dict = {"torch": str(torch) if torch else None, "prefix": sys.prefix, "executable": sys.executable}
        if wrote:  # ./dvclive is this run's, not another run's in the same folder
            seen["dvclive_written"] = True
        try:
            threads = getattr(sys.modules.get("torch"), "get_num_threads", None)
            if threads is not None:  # the intra-op threads it computed with (the record's conditions)
                seen["torch_threads"] = threads()
            cuda = getattr(sys.modules.get("torch"), "cuda", None)
            if cuda is not None and cuda.is_initialized():
                used = [i for i in range(cuda.device_count()) if cuda.max_memory_allocated(i) > 0]
                properties = [cuda.get_device_properties(i) for i in used or [cuda.current_device()]]
                seen["cuda"] = [{"name": p.name, "uuid": str(getattr(p, "uuid", ""))} for p in properties]
            xla = sys.modules.get("torch_xla")
            started = getattr(getattr(xla, "_XLAC", None), "_xla_runtime_is_initialized", lambda: False)
            if xla is not None and started():
                seen["xla"] = sys.modules["torch_xla.runtime"].device_type()
            if "torch_tpu" in sys.modules:
                seen["torch_tpu"] = True
        except Exception as exc:  # noqa: BLE001 - a report never changes how the program ends
            seen["error"] = f"{type(exc).__name__}: {exc}"[:300]
        path = os.path.join(folder, f"{os.getpid()}.json")
        try:
            with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
                handle.write(encoded(seen))
            os.replace(f"{path}.tmp", path)
        except OSError:
            pass

    if folder:
        atexit.register(report)
        if dvclive and hasattr(sys, "addaudithook"):  # Python 3.8+
            sys.addaudithook(audit)


_CHAIN = """
def _envkit_chain():
    # The sitecustomize this interpreter has of its own (Debian's, a venv's) runs too.
    import importlib.machinery, os, sys
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.origin and spec.origin.endswith(".py"):
        with open(spec.origin, "rb") as handle:
            exec(compile(handle.read(), spec.origin, "exec"), {"__name__": "sitecustomize", "__file__": spec.origin})


device_hook()
_envkit_chain()
"""


def watched(env: dict[str, str], folder: Path, dvclive: Path) -> dict[str, str]:
    """``env`` with the device hook on PYTHONPATH (torchrun's workers and every other Python the command starts
    inherit it), writing its reports under ``folder``, and the ``dvclive`` folder whose writes it reports."""
    (folder / "hook").mkdir()
    (folder / "reports").mkdir()
    (folder / "hook" / "sitecustomize.py").write_text(_source(device_hook) + _CHAIN, encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(folder / "hook"), env.get("PYTHONPATH")]))
    # Run in a venv (envkit experiment --python .venv-cuda/bin/python), its bin/ comes first, as activating it
    # does: torchrun and accelerate are the venv's, not another one's on PATH.
    venv = [os.path.dirname(sys.executable)] if sys.prefix != sys.base_prefix else []
    search = os.pathsep.join(dict.fromkeys([*venv, *env.get("PATH", os.defpath).split(os.pathsep)]))
    reports = {DEVICE_REPORTS_VARIABLE: str(folder / "reports"), DVCLIVE_VARIABLE: str(dvclive.absolute())}
    return {**env, "PATH": search, "PYTHONPATH": path, **reports}


def _source(function) -> str:
    """The source of a function of this module, from its def to its last indented line, as inspect.getsource gives
    it: inspect and the tokenizer it runs over the whole file cost 40-75 ms at the start of every run (issue 42)."""
    code = function.__code__
    with open(code.co_filename, encoding="utf-8") as handle:
        lines = handle.read().splitlines(keepends=True)[code.co_firstlineno - 1 :]
    after = (index for index, line in enumerate(lines[1:], 1) if line.strip() and not line[0].isspace())
    return "".join(lines[: next(after, len(lines))]).rstrip() + "\n"


def observed_device(reports: list[dict], label: str | None) -> dict:
    """What the run's Python processes initialised: the accelerator (cuda, tpu, else cpu), its name and the
    devices used, beside the target's label; ``observed`` false where no Python process of the run reported
    (a program that is not Python, or one that ignores PYTHONPATH). ``reports``: process_reports'."""
    cuda = {json.dumps(device, sort_keys=True): device for r in reports for device in r.get("cuda") or ()}
    xla = sorted({r["xla"] for r in reports if isinstance(r.get("xla"), str)})
    accelerator, name, count = "cpu", facts.device_name("cpu"), None
    if cuda:
        devices = list(cuda.values())
        accelerator, name, count = "cuda", devices[0].get("name"), len(devices)
    elif "TPU" in xla or any(r.get("torch_tpu") for r in reports):
        accelerator, name = "tpu", os.environ.get("TPU_ACCELERATOR_TYPE") or os.environ.get("ACCELERATOR_TYPE")
    return {
        "observed": bool(reports),
        "accelerator": accelerator if reports else None,
        "name": name if reports else None,
        "count": count,
        "xla": xla[0] if len(xla) == 1 else (xla or None),
        "label": label,
        "python_processes": len(reports),
        "errors": sorted({r["error"] for r in reports if isinstance(r.get("error"), str)}),
        "interpreter": _other_interpreter(reports),
    }


def wrote_dvclive(reports: list[dict]) -> bool:
    """Whether a Python process of the run wrote a file under ./dvclive: only then is that folder, which every run
    started in the same working directory shares, this run's (importing dvclive is not enough: a run that failed
    before it wrote took an overlapping run's accuracy, issue 39 §10). ``reports``: process_reports'."""
    return any(report.get("dvclive_written") is True for report in reports)


def process_reports(folder: Path) -> list[dict]:
    """The reports the run's Python processes wrote at exit (one that cannot be read is none)."""
    reports = []
    for path in sorted((folder / "reports").glob("*.json")):
        try:
            reports.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return [report for report in reports if isinstance(report, dict)]


def _other_interpreter(reports: list[dict]) -> str | None:
    """The interpreter whose processes imported torch (else any of the run's), where it is not the wrapper's own:
    a command that started another venv's Python ran that venv's packages."""
    ran = [r for r in reports if r.get("torch")] or reports
    prefixes = [r.get("prefix") for r in ran if isinstance(r.get("executable"), str)]
    other = max(set(prefixes), key=prefixes.count) if prefixes else sys.prefix
    return next((r["executable"] for r in ran if r.get("prefix") == other), None) if other != sys.prefix else None


def run_warnings(device: dict, facts: dict) -> list[str]:
    """What does not match: a device other than the target's label promised (a GPU run that trained on the CPU),
    another interpreter than the one the run was started with, packages other than the lock's."""
    label, used = device.get("label"), device["accelerator"]
    warnings = []
    if device["observed"] and used != ACCELERATORS.get(label or "", "cpu"):
        warnings.append(f"the target says {label}, but the program initialised {used}: recorded as a {used} run")
    if device.get("interpreter"):
        warnings.append(
            f"the command ran {device['interpreter']}, not {sys.executable} that started it: the record's versions, "
            "distributions and lock are the ones that ran"
        )
    return warnings + facts.get("lock_drift", [])
