"""TorchTPU as mnist.py's second TPU backend (recipes/tpu_backend.py).

Fast, in the dev environment (no TPU backend installed): which backend ``--tpu-backend`` picks from
what is installed (module discovery faked), the strategies each backend allows, and the backend the
results record, with TorchTPU's one-device strategy run on the CPU. The tests named
``test_faked_torch_tpu_*`` run with TorchTPU faked (its device is the CPU, its launcher and
tpu_dist stand-ins): what they check for real is mnist.py's own logic, never TorchTPU.

Slow, in the TorchTPU environment (``.venv-tpu`` from requirements/tpu.in, ``make tpu-env``):
torch-tpu 0.2.0 has no CPU mode, so what runs is its no-TPU path. ``import torch_tpu`` works and
mnist.py says in one line that there is no TPU, with exit status 2, no traceback and no hang.
Every such process runs in an empty network namespace (``unshare -n``) with TPU_SKIP_MDS_QUERY=1:
without a TPU, libtpu looks for the cloud metadata server. Missing environment: skip, or fail when
ENVKIT_REQUIRE_TPU_ENV=1 (CI).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import harness
import mnist
import pytest
import torch
import tpu_backend
from mnist_files import RECIPE, REPO_ROOT, read_results
from xla_env import NO_TPU_LINE, environment_missing

DEFAULT_TPU_PYTHON = REPO_ROOT / ".venv-tpu" / "bin" / "python"
NO_TPU_TIMEOUT = 180  # seconds; the metadata server's retries would take minutes
FAKE = ("--dataset", "fake", "--fake-train-size", "256", "--fake-test-size", "64", "--quiet")


@pytest.fixture
def installed(monkeypatch):
    """``installed("torch_tpu", ...)``: the TPU backends module discovery finds, whatever is really installed."""
    real_find_spec = importlib.util.find_spec

    def pretend(*names: str) -> None:
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *rest: (
                (object() if name in names else None) if name in tpu_backend.BACKENDS else real_find_spec(name, *rest)
            ),
        )

    return pretend


def test_auto_picks_the_installed_backend_and_torch_xla_when_both_are(installed):
    installed("torch_tpu")
    assert tpu_backend.choose("auto") == "torch_tpu"
    installed("torch_xla")
    assert tpu_backend.choose("auto") == "torch_xla"
    installed("torch_tpu", "torch_xla")
    assert tpu_backend.choose("auto") == "torch_xla"  # E1's API
    assert tpu_backend.choose("torch_tpu") == "torch_tpu"


def test_the_recipes_know_the_backends_envkit_knows():
    from envkit.project.matrix import TPU_BACKENDS  # recipes never import envkit: the test keeps the two lists one

    assert set(tpu_backend.BACKENDS) == set(TPU_BACKENDS) == set(tpu_backend.EVERY_DEVICE)


def test_a_backend_that_is_not_installed_is_one_line(installed):
    installed()
    with pytest.raises(
        harness.RecipeError,
        match=r"^--device tpu needs a TPU backend \(torch_xla or torch_tpu\), "
        r"which is not installed here; use the tpu-vm image",
    ):
        tpu_backend.choose("auto")
    installed("torch_xla")
    with pytest.raises(
        harness.RecipeError, match="^--device tpu needs torch_tpu, which is not installed here; installed: torch_xla;"
    ):
        tpu_backend.choose("torch_tpu")


@pytest.fixture
def cpu_as_torch_tpu(installed, monkeypatch):
    """TorchTPU "installed", its device the CPU: everything but the device itself runs."""
    installed("torch_tpu")
    monkeypatch.setattr(tpu_backend, "torch_tpu_device", lambda: torch.device("cpu"))


def test_faked_torch_tpu_each_backend_has_its_own_strategies(cpu_as_torch_tpu, installed, monkeypatch):
    args = mnist.parse_args(["--device", "tpu"])
    assert (args.backend, args.strategy, args.cores) == ("torch_tpu", "single", "1")
    args = mnist.parse_args(["--device", "tpu", "--cores", "all"])
    assert (args.backend, args.strategy, args.cores) == ("torch_tpu", "ddp", "all")
    with pytest.raises(harness.RecipeError, match="^--strategy xmp is not torch_tpu's; use single or ddp$"):
        mnist.parse_args(["--device", "tpu", "--strategy", "xmp"])
    installed("torch_xla", "torch_tpu")
    monkeypatch.setattr(harness, "import_torch_xla", lambda: None)
    args = mnist.parse_args(["--device", "tpu", "--cores", "all"])
    assert (args.backend, args.strategy) == ("torch_xla", "xmp")
    with pytest.raises(harness.RecipeError, match="^--strategy ddp is not torch_xla's; use single or xmp or spmd$"):
        mnist.parse_args(["--device", "tpu", "--strategy", "ddp"])
    assert mnist.parse_args(["--device", "tpu", "--tpu-backend", "torch_tpu"]).backend == "torch_tpu"
    assert mnist.parse_args(["--device", "cpu"]).backend is None


def test_faked_torch_tpu_results_record_the_backend_that_trained(cpu_as_torch_tpu, tmp_path):
    """TorchTPU faked, its device the CPU: the training and the results file are real."""
    mnist.main(["--device", "tpu", *FAKE, "--epochs", "1", "--per-device-batch", "64", "--results-dir", str(tmp_path)])
    configuration = read_results(tmp_path, "tpu")["configuration"]
    assert (configuration["backend"], configuration["strategy"], configuration["cores"]) == ("torch_tpu", "single", 1)
    mnist.main(["--device", "cpu", *FAKE, "--epochs", "1", "--results-dir", str(tmp_path)])
    assert read_results(tmp_path, "cpu")["configuration"]["backend"] is None


def test_without_a_tpu_chip_torch_tpu_is_neither_loaded_nor_asked_for_metadata(tmp_path):
    """A torch_tpu package on the path and no Google device on the PCI bus: importing tpu_backend
    (before torch) turns off the autoload, the metadata query and TorchTPU's start-up logs."""
    script = (
        "import os, sys; sys.path[:0] = sys.argv[1:]; import tpu_backend; print(tpu_backend.has_tpu_chip(), "
        "*(os.environ.get(name) for name in ('TORCH_DEVICE_BACKEND_AUTOLOAD', 'TPU_SKIP_MDS_QUERY', 'TF_CPP_MIN_LOG_LEVEL')))"
    )
    keep = {
        name: value
        for name, value in os.environ.items()
        if name not in ("TORCH_DEVICE_BACKEND_AUTOLOAD", "TPU_SKIP_MDS_QUERY", "TF_CPP_MIN_LOG_LEVEL")
    }
    done = with_torch_tpu_installed(tmp_path, script, keep)
    assert done.stdout.split() == ["False", "0", "1", "1"], done.stderr


def test_mnist_sets_tpu_backends_environment_before_torch_is_imported(tmp_path):
    """mnist.py imports tpu_backend before anything that imports torch (harness does): torch reads
    TORCH_DEVICE_BACKEND_AUTOLOAD when it is imported, so it must already be set then."""
    script = """
import os, sys
sys.path[:0] = sys.argv[1:]
seen = []

class WatchTorch:  # notes the variable when torch is first looked for, then lets the import go on
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD"))

sys.meta_path.insert(0, WatchTorch())
import mnist
print(seen)
"""
    env = {name: value for name, value in os.environ.items() if name != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    done = with_torch_tpu_installed(tmp_path, script, env)
    assert done.stdout.split() == ["['0']"], done.stderr


def with_torch_tpu_installed(tmp_path: Path, script: str, env: dict) -> subprocess.CompletedProcess:
    """Python running ``script`` with an empty torch_tpu package and recipes/ first on its path."""
    (tmp_path / "torch_tpu").mkdir()
    (tmp_path / "torch_tpu" / "__init__.py").write_text("")
    return subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), str(RECIPE.parent)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_google_pci_vendor_is_a_tpu_chip(tmp_path):
    for index, vendor in enumerate(("0x8086", "0x1ae0")):
        (tmp_path / f"0000:00:0{index}.0").mkdir()
        (tmp_path / f"0000:00:0{index}.0" / "vendor").write_text(f"{vendor}\n")
        assert tpu_backend.has_tpu_chip(tmp_path) == (vendor == "0x1ae0")


# --------------------------------------------------------------------------- the TorchTPU environment (slow)


def tpu_python() -> str:
    """A Python with torch_tpu installed (ENVKIT_TPU_PYTHON, else .venv-tpu) and a way to run it without a
    network (``unshare -n``); skip when either is missing, fail instead under ENVKIT_REQUIRE_TPU_ENV=1."""
    python = Path(os.environ.get("ENVKIT_TPU_PYTHON") or DEFAULT_TPU_PYTHON)
    problem = None
    if not python.exists():
        problem = f"no TorchTPU interpreter at {python} (create it with 'make tpu-env' or set ENVKIT_TPU_PYTHON)"
    elif subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        problem = "'unshare -n' cannot make an empty network namespace here (needs root or user namespaces)"
    elif (
        subprocess.run(
            [str(python), "-c", "import importlib.util, sys; sys.exit(not importlib.util.find_spec('torch_tpu'))"],
            capture_output=True,
        ).returncode
        != 0
    ):
        problem = f"{python} has no torch_tpu"
    if problem is None:
        return str(python)
    environment_missing(problem, "ENVKIT_REQUIRE_TPU_ENV")


def offline(python: str, *args: str) -> subprocess.CompletedProcess:
    """``python args`` in an empty network namespace with TPU_SKIP_MDS_QUERY=1: nothing reaches off this host."""
    return subprocess.run(
        ["unshare", "-n", python, *args],
        capture_output=True,
        text=True,
        timeout=NO_TPU_TIMEOUT,
        env={**os.environ, "TPU_SKIP_MDS_QUERY": "1"},
        cwd=REPO_ROOT,
    )


@pytest.mark.slow
def test_torch_tpu_imports_and_finds_no_device():
    done = offline(
        tpu_python(),
        "-c",
        "import torch, torch_tpu; print(torch_tpu.__name__, torch.accelerator.current_accelerator())",
    )
    assert (done.returncode, done.stdout) == (0, "torch_tpu None\n"), done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [(), ("--cores", "all")], ids=["one-device", "every-device"])
def test_mnist_without_a_tpu_is_one_line_and_exit_2(strategy, tmp_path):
    done = offline(tpu_python(), str(RECIPE), "--device", "tpu", *strategy, *FAKE, "--results-dir", str(tmp_path))
    assert (done.returncode, done.stderr, done.stdout) == (2, NO_TPU_LINE, "")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_cpu_training_next_to_torch_tpu_neither_hangs_nor_logs(tmp_path):
    """torch-tpu merely installed: a CPU run's first backward() would otherwise start libtpu."""
    done = offline(
        tpu_python(),
        str(RECIPE),
        "--device",
        "cpu",
        *FAKE,
        "--max-steps",
        "2",
        "--epochs",
        "1",
        "--results-dir",
        str(tmp_path),
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr[-3000:]
    assert read_results(tmp_path, "cpu")["environment"]["torch"].startswith("2.13.0")
    # torch-tpu's version is the run wrapper's fact, not the recipe's (issue 31 §3): asked of the interpreter here.
    version = "from importlib.metadata import version; print(version('torch_tpu'))"
    asked = subprocess.run([tpu_python(), "-c", version], capture_output=True, text=True)
    assert asked.stdout.strip() == "0.2.0", asked.stderr


def test_missing_torch_tpu_interpreter_skips_or_fails_in_ci(monkeypatch, tmp_path):
    monkeypatch.setenv("ENVKIT_TPU_PYTHON", str(tmp_path / "no-python"))
    for required, outcome in (("1", pytest.fail.Exception), ("0", pytest.skip.Exception)):
        monkeypatch.setenv("ENVKIT_REQUIRE_TPU_ENV", required)
        with pytest.raises(outcome, match=f"no TorchTPU interpreter at {tmp_path / 'no-python'} "):
            tpu_python()


def test_faked_torch_tpu_cores_and_strategy_must_fit(cpu_as_torch_tpu):
    with pytest.raises(
        harness.RecipeError,
        match="^--cores 1 does not fit --strategy ddp: --strategy single trains on one core, ddp on all of them$",
    ):
        mnist.parse_args(["--device", "tpu", "--cores", "1", "--strategy", "ddp"])


def test_faked_torch_tpu_every_device_starts_one_torchrun_process_per_device(cpu_as_torch_tpu, monkeypatch):
    """The parent half of TorchTPU's launch, with set_tpu_launch_env and subprocess.run faked: the count
    of processes it derives from the ports, and the torchrun command, are real."""
    launch = type(
        "FakeTorchTpuDistributed",
        (),
        {
            "set_tpu_launch_env": staticmethod(
                lambda: os.environ.__setitem__("TORCH_TPU_SLICEBUILDER_ADDRESSES", "localhost:8471,localhost:8472")
            )
        },
    )
    monkeypatch.setattr(torch, "tpu", type("FakeTorchTpu", (), {"distributed": launch}), raising=False)
    monkeypatch.delenv("TORCH_TPU_SLICEBUILDER_ADDRESSES", raising=False)
    for name in ("LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    started = []
    monkeypatch.setattr(
        subprocess, "run", lambda command, check: started.append(command) or subprocess.CompletedProcess(command, 0)
    )
    with pytest.raises(SystemExit) as exit_:
        mnist.main(["--device", "tpu", "--cores", "all", *FAKE])
    assert exit_.value.code == 0 and len(started) == 1
    assert started[0][1:] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--local-addr",
        "127.0.0.1",
        "--nproc-per-node",
        "2",
        "--",
        str(RECIPE),
        "--device",
        "tpu",
        "--cores",
        "all",
        *FAKE,
    ]


def test_faked_torch_tpu_each_torchrun_process_trains_a_ddp_replica(cpu_as_torch_tpu, monkeypatch, tmp_path):
    """The worker half, at world size 1 on the CPU: gloo stands in for tpu_dist, which only a TPU registers;
    the DDP training and its results are real."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for name, value in {
        "LOCAL_RANK": "0",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }.items():
        monkeypatch.setenv(name, value)
    joined = []
    real_init = torch.distributed.init_process_group
    monkeypatch.setattr(
        torch.distributed, "init_process_group", lambda backend: joined.append(backend) or real_init("gloo")
    )
    mnist.main(
        [
            "--device",
            "tpu",
            "--cores",
            "all",
            *FAKE,
            "--epochs",
            "1",
            "--per-device-batch",
            "64",
            "--results-dir",
            str(tmp_path),
        ]
    )
    assert joined == ["tpu_dist"]
    configuration = read_results(tmp_path, "tpu-x1-ddp")["configuration"]
    # The report's vocabulary: DDP is parallel "ddp" on every device; strategy names E1's torch_xla ones.
    assert (
        configuration["backend"],
        configuration["parallel"],
        configuration["strategy"],
        configuration["world_size"],
    ) == ("torch_tpu", "ddp", None, 1)
    from envkit.runs.model import configuration_label

    assert configuration_label(configuration) == "tpu DDP×1 (torch_tpu)"
