"""`envkit demo` and `envkit compare`: the exact commands they plan (dry run), and running a plan."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
from paths import REPO_ROOT

from envkit.cli import main
from envkit.cli import report as cli_report
from envkit.host.doctor import HostFacts
from envkit.host.venv import MARKER
from envkit.runs.plans import RunPlan, Step
from envkit.runs.run_steps import execute
from envkit.support import provenance

PY = sys.executable
# The demo runs the recipes in this interpreter's venv, made from a lock whose sha256 their results record.
HERE = f"{PY} (made from /locks/requirements/dev.lock: its results name lock sha256 {'a' * 12})"
NO_ENGINE = HostFacts(docker_error="no Docker engine answers at unix:///var/run/docker.sock", cpu_count=2)
WITH_ENGINE = HostFacts(docker_version="20.10.24", cpu_count=2)
GPU_HOST_NO_ENGINE = HostFacts(docker_error="no engine", gpus=["GPU 0: A", "GPU 1: B"], cpu_count=8)


def on_host(results: str, device: str, experiment: str) -> str:
    """A run on this host, up to its recipe: from the project's root through the run wrapper, which records the run
    whether or not the recipe gets to write its own record."""
    return (
        f"cd {REPO_ROOT} && ENVKIT_RESULTS_DIR={REPO_ROOT / results} ENVKIT_DEVICE={device} "
        f"ENVKIT_EXPERIMENT={experiment} {PY} {provenance.__file__} {PY}"
    )


LOCAL_DEMO_RUNS = f"""\
# 2. mnist on eager CPU
{on_host("results/demo", "cpu", "cpu-mnist")} recipes/mnist.py --device cpu --quiet --dataset fake --epochs 4 --fake-train-size 3840 --fake-test-size 1000
# 3. cifar, one CPU process
{on_host("results/demo", "cpu", "cpu-single-cifar")} recipes/cifar.py --device cpu --parallel none --quiet --dataset fake --epochs 4 --model mobilenet_v2 --global-batch 32 --image-size 64 --fake-train-size 512 --fake-test-size 128
# 4. cifar, DDP over 2 gloo processes
{on_host("results/demo", "cpu", "cpu-ddp-cifar")} recipes/cifar.py --device cpu --parallel ddp --nproc 2 --quiet --dataset fake --epochs 4 --model mobilenet_v2 --global-batch 32 --image-size 64 --fake-train-size 512 --fake-test-size 128
# 5. report
{PY} -m envkit report results/demo --plot results/demo/comparison.png --html results/demo/comparison.html
"""


@pytest.fixture
def in_repo(repo_root, monkeypatch, tmp_path):
    """Run the CLI from the project root, as `make demo` does, with chosen host facts."""
    monkeypatch.chdir(repo_root)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    (tmp_path / MARKER).write_text(json.dumps({"lock": "/locks/requirements/dev.lock", "lock_sha256": "a" * 64}))

    def use(facts: HostFacts, runnable: list[str]):
        monkeypatch.setattr(cli_report, "_host_facts", lambda config: (facts, runnable))

    return use


def dry_run(argv: list[str], capsys) -> str:
    assert main(argv + ["--dry-run"]) == 0
    return capsys.readouterr().out


def test_demo_without_docker_runs_the_recipes_here(in_repo, capsys):
    in_repo(NO_ENGINE, [])
    assert dry_run(["demo"], capsys) == (
        f"# Docker is not usable (no Docker engine answers at unix:///var/run/docker.sock); running the recipes with {HERE}\n"
        "# 1. render every target\n"
        f"{PY} -m envkit render --all --config envkit.yaml\n" + LOCAL_DEMO_RUNS
    )


def test_demo_no_docker_flag_wins_over_a_usable_engine(in_repo, capsys):
    in_repo(WITH_ENGINE, ["cpu-mnist"])
    out = dry_run(["demo", "--no-docker"], capsys)
    assert out.startswith(f"# --no-docker: running the recipes with {HERE}\n# 1. render every target\n")
    assert out.endswith(LOCAL_DEMO_RUNS)


def test_demo_with_docker_runs_in_the_cpu_image_and_falls_back(in_repo, capsys):
    in_repo(WITH_ENGINE, ["cpu-mnist"])
    results = "results/demo"
    image_args = "--device cpu --quiet --dataset fake --epochs 4"
    cifar_args = "--model mobilenet_v2 --global-batch 32 --image-size 64 --fake-train-size 512 --fake-test-size 128"
    out = dry_run(["demo", "--base-image", "envkit-base:bookworm"], capsys)
    assert out.startswith(
        "# Docker 20.10.24 is usable: running in the cpu image\n"
        f"# 1. render every target\n{PY} -m envkit render --all --config envkit.yaml\n"
        f"# 2. build the cpu image\n{PY} -m envkit build cpu --config envkit.yaml --base-image envkit-base:bookworm\n"
        "#    if this fails:\n"
        f"#    # the cpu image could not be built; running the recipes with {HERE} instead\n"
    )
    assert out.endswith(
        f"# 3. mnist in the cpu image\nRESULTS_DIR={results} docker/cpu/run.sh python recipes/mnist.py {image_args} --fake-train-size 3840 --fake-test-size 1000\n"
        f"# 4. cifar, one process in the cpu image\nRESULTS_DIR={results} docker/cpu/run.sh python recipes/cifar.py --device cpu --parallel none --quiet --dataset fake --epochs 4 {cifar_args}\n"
        f"# 5. cifar, DDP over 2 gloo processes in the cpu image\nRESULTS_DIR={results} docker/cpu/run.sh python recipes/cifar.py --device cpu --parallel ddp --nproc 2 --quiet --dataset fake --epochs 4 {cifar_args}\n"
        f"# 6. report\n{PY} -m envkit report results/demo --plot results/demo/comparison.png --html results/demo/comparison.html\n"
    )
    # the fallback is the local plan without its render step, renumbered
    assert f"#    # 1. mnist on eager CPU\n#    {on_host('results/demo', 'cpu', 'cpu-mnist')} recipes/mnist.py" in out


def test_compare_runs_the_experiments_doctor_allows(in_repo, repo_root, capsys):
    in_repo(WITH_ENGINE, ["cpu-mnist"])
    out = dry_run(["compare", "--epochs", "1", "--dataset", "fake", "--max-steps", "5", "--reference"], capsys)
    report = f"{PY} -m envkit report results --format md --reference\n"
    assert out == (
        f"# 1. experiment cpu-mnist\n{PY} -m envkit experiment --results-dir {repo_root / 'results'} cpu-mnist -- --dataset fake --epochs 1 --max-steps 5\n"
        "#    if this fails:\n"
        f"#    # the first Docker experiment failed; running the recipes with {HERE} instead\n"
        f"#    # 1. mnist on eager CPU\n#    {on_host('results', 'cpu', 'cpu-mnist')} recipes/mnist.py --device cpu --quiet --dataset fake --epochs 1 --max-steps 5\n"
        f"#    # 2. cifar, one CPU process\n#    {on_host('results', 'cpu', 'cpu-single-cifar')} recipes/cifar.py --device cpu --parallel none --quiet --dataset fake --epochs 1 --max-steps 5\n"
        f"#    # 3. cifar, DDP over 2 gloo processes\n#    {on_host('results', 'cpu', 'cpu-ddp-cifar')} recipes/cifar.py --device cpu --parallel ddp --nproc 2 --quiet --dataset fake --epochs 1 --max-steps 5\n"
        f"#    # 4. report\n#    {report}"
        f"# 2. report\n{report}"
    )


def test_compare_on_real_data_says_where_it_comes_from_and_what_fake_does(in_repo, capsys):
    """Before: `make compare` started downloads (or failed offline) without a word about them."""
    in_repo(WITH_ENGINE, ["cpu-mnist"])
    out = dry_run(["compare", "--epochs", "1"], capsys)
    assert out.splitlines()[0] == (
        "# --dataset real: each recipe downloads MNIST or CIFAR-10 into its data directory on first use, which needs "
        "the network; DATASET=fake (make) or --dataset fake trains on generated data, no download"
    )
    assert "--dataset real" not in dry_run(["compare", "--dataset", "fake"], capsys).splitlines()[0]


def test_compare_without_docker_runs_cpu_and_gpu_recipes_here(in_repo, capsys):
    in_repo(GPU_HOST_NO_ENGINE, [])
    out = dry_run(["compare", "--results-dir", "out", "--dataset", "fake", "--baseline", "cuda ×1"], capsys)
    common = "--quiet --dataset fake"

    def cpu(experiment):
        return on_host("out", "cpu", experiment)

    def cuda(experiment):
        return on_host("out", "cuda", experiment)

    assert out == (
        f"# no Docker experiments on this host (no engine); running the recipes with {HERE}\n"
        f"# 1. mnist on eager CPU\n{cpu('cpu-mnist')} recipes/mnist.py --device cpu {common}\n"
        f"# 2. cifar, one CPU process\n{cpu('cpu-single-cifar')} recipes/cifar.py --device cpu --parallel none {common}\n"
        f"# 3. cifar, DDP over 2 gloo processes\n{cpu('cpu-ddp-cifar')} recipes/cifar.py --device cpu --parallel ddp "
        f"--nproc 2 {common}\n"
        f"# 4. mnist on one GPU\n{cuda('gpu-mnist')} recipes/mnist.py --device cuda {common}\n"
        f"# 5. cifar, one GPU\n{cuda('gpu-single-cifar')} recipes/cifar.py --device cuda --parallel none {common}\n"
        f"# 6. cifar, DataParallel over 2 GPUs\n{cuda('gpu-dp-cifar')} recipes/cifar.py --device cuda --parallel dp "
        f"{common}\n"
        f"# 7. cifar, DDP over 2 GPUs\n{cuda('gpu-ddp-cifar')} recipes/cifar.py --device cuda --parallel ddp {common}\n"
        f"# 8. report\n{PY} -m envkit report out --format md --baseline 'cuda ×1'\n"
    )


def test_compare_on_a_tpu_vm_without_docker_runs_one_core_then_all_cores(in_repo, monkeypatch, capsys):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "torch_xla" else real_find_spec(name, *a)
    )
    in_repo(HostFacts(docker_error="no engine", devices={"tpu": ["/dev/accel0"]}, cpu_count=8), [])
    out = dry_run(["compare", "--results-dir", "out", "--dataset", "fake"], capsys)
    common = "--quiet --dataset fake"
    one, every = on_host("out", "tpu", "tpu-mnist-single"), on_host("out", "tpu", "tpu-mnist")
    assert f"# 4. mnist on one TPU core\n{one} recipes/mnist.py --device tpu --cores 1 {common}\n" in out
    assert f"# 5. mnist on all TPU cores\n{every} recipes/mnist.py --device tpu --cores all {common}\n" in out
    # then E3's runs, each under its own run name
    assert "# 6. E3, batch and learning-rate scaling on all TPU cores: e3-batch-scaling-b16\n" in out
    assert (
        f" --per-device-batch 128 --lr-scaling none --warmup-epochs 0 --run-name e3-batch-scaling-b128 --dataset fake "
        f"--fake-train-size 4096 --epochs 10 {common}\n# 9. "
    ) in out


def test_missing_config_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--dry-run"]) == 2
    assert capsys.readouterr().err == (
        "envkit: error: config file envkit.yaml not found: run from the project directory or pass --config FILE\n"
    )


def _python(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def test_a_failed_step_does_not_stop_the_others(tmp_path, capsys):
    marker = tmp_path / "ran"
    plan = RunPlan(
        [
            Step("fails", _python("raise SystemExit(3)")),
            Step("still runs", _python(f"open({str(marker)!r}, 'w').write('x')")),
        ]
    )
    assert execute(plan, dry_run=False) is False
    assert marker.exists()
    assert "envkit: failed: fails (exit 3)" in capsys.readouterr().err


def test_a_failed_build_switches_to_the_fallback(tmp_path, capsys):
    marker = tmp_path / "fallback-ran"
    fallback = RunPlan(
        [Step("local run", _python(f"open({str(marker)!r}, 'w').write('x')"))], ["building failed; running here"]
    )
    plan = RunPlan(
        [
            Step("render", _python("pass")),
            Step("build", _python("raise SystemExit(1)")),
            Step("in image", _python("raise SystemExit(5)")),
        ],
        [],
        fallback,
        1,
    )
    assert execute(plan, dry_run=False) is True
    assert marker.exists()
    err = capsys.readouterr().err
    assert "envkit: building failed; running here" in err and "in image" not in err


def test_a_missing_program_is_a_failed_step_not_a_traceback(tmp_path, capsys):
    plan = RunPlan([Step("make something", (str(tmp_path / "no-such-make"), "target"))])
    assert execute(plan, dry_run=False) is False
    err = capsys.readouterr().err
    assert f"envkit: cannot start {tmp_path / 'no-such-make'}: No such file or directory" in err
    assert "envkit: failed: make something (exit 127)" in err


def test_step_environment_reaches_the_command(tmp_path):
    out = tmp_path / "env.json"
    code = f"import json, os; json.dump(os.environ['RESULTS_DIR'], open({str(out)!r}, 'w'))"
    assert execute(RunPlan([Step("env", _python(code), {"RESULTS_DIR": "/some/where"})]), dry_run=False)
    assert json.loads(out.read_text()) == "/some/where"


def test_a_recipe_run_here_that_fails_before_writing_gets_its_record(repo_root, tmp_path):
    """A host run goes through the run wrapper, as run.sh's do: a recipe that dies before it writes its results
    (a DDP rendezvous that times out, say) leaves a record with its exit status, not nothing."""
    from envkit.project.experiments import load_experiments
    from envkit.runs.plans import host_step, run_env

    entry = load_experiments(repo_root / "envkit.yaml")["cpu-ddp-cifar"]
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "cifar.py").write_text("import sys\nsys.exit(7)\n")
    results = tmp_path / "results"
    step = host_step("cifar", entry, PY, tmp_path, ("--parallel", "ddp"), run_env(entry.kind, results))
    assert not execute(RunPlan([step]), dry_run=False)
    (record,) = [json.loads(path.read_text()) for path in results.glob("*.json")]
    assert record["run"]["experiment"] == "cpu-ddp-cifar" and record["run"]["exit_status"] == 7
    assert record["run"]["argv"] == [PY, "recipes/cifar.py", "--parallel", "ddp"]


@pytest.mark.slow
def test_demo_runs_end_to_end_without_docker(repo_root, tmp_path, monkeypatch, capfd):
    """The real thing on this machine: render, recipes on CPU (MNIST; CIFAR one process vs DDP over gloo), report, plot."""
    project = tmp_path / "project"  # a copy as a clone has it, so rendering does not touch the checkout's docker/
    project.mkdir()
    for part in ("envkit.yaml", "templates", "recipes", "docker", "notebooks"):
        copy = shutil.copytree if (repo_root / part).is_dir() else shutil.copy
        copy(repo_root / part, project / part)
    monkeypatch.chdir(project)
    monkeypatch.setattr(cli_report, "_host_facts", lambda config: (NO_ENGINE, []))
    assert main(["demo", "--no-docker"]) == 0
    out = capfd.readouterr().out  # the report is printed by a child process
    results = project / "results" / "demo"
    names = sorted(p.name for p in results.glob("*.json"))
    assert len(names) == 3 and names[0].startswith("cifar-") and names[0].endswith("-x2-ddp.json"), names
    assert names[1].startswith("cifar-") and names[2].startswith("mnist-"), names
    assert (project / "docker" / "cpu" / "run.sh").is_file()
    assert "| cpu ×1 | mnist-net | 128 | 1 |" in out
    assert (
        "| cpu ×1 | mobilenet_v2 | 32 | 32 | 64 | 1 |" in out
        and "| cpu DDP×2 | mobilenet_v2 | 32 | 16 | 64 | 1 |" in out
    )
    # the demo is long enough to show learning: every run well above chance (10%)
    accuracies = {name: json.loads((results / name).read_text())["metrics"]["test_accuracy"] for name in names}
    assert all(acc > 0.5 for acc in accuracies.values()), accuracies
    assert (results / "comparison.png").read_bytes().startswith(b"\x89PNG")
    assert "<table" in (results / "comparison.html").read_text(encoding="utf-8")
    # Every run names the lock this interpreter's venv was made from (make venv: requirements/dev.lock).
    from envkit.host.interpreter import interpreter_lock

    marker = interpreter_lock()
    recorded = {json.loads((results / name).read_text())["environment"]["lock_sha256"] for name in names}
    assert recorded == {marker["lock_sha256"] if marker else None}
    # Each went through the run wrapper (a run that fails before the recipe writes still gets its record).
    runs = {json.loads((results / name).read_text())["run"]["experiment"] for name in names}
    assert runs == {"cpu-mnist", "cpu-single-cifar", "cpu-ddp-cifar"}
    print(out)  # shown with -s: the demo's table


def test_the_demo_says_when_its_interpreter_was_made_from_no_lock(in_repo, capsys, monkeypatch, tmp_path):
    in_repo(NO_ENGINE, [])
    (tmp_path / MARKER).unlink()
    assert dry_run(["demo"], capsys).startswith(
        "# Docker is not usable (no Docker engine answers at unix:///var/run/docker.sock); running the recipes with "
        f"{PY} (made from no lock: its results record lock_sha256 null)\n"
    )
