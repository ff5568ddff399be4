"""`envkit init` in an existing repository (issue 25 §2): tests/example_project is a user's repository."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import paths
import pytest

from envkit.cli import main
from envkit.project.experiments import MAKE_TARGETS, load_experiments
from envkit.project.load import load_config
from envkit.support.provenance_records import RESULTS_FOLDER

EXAMPLE = paths.TESTS / "example_project"
ENVKIT = str(Path(sys.executable).with_name("envkit"))


@pytest.fixture
def repo(tmp_path):
    shutil.copytree(EXAMPLE, tmp_path / "repo")
    return tmp_path / "repo"


def tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


def init(capsys, root: Path) -> tuple[int, str]:
    code = main(["init", "--dir", str(root)])
    return code, capsys.readouterr().err


def test_init_makes_a_project_of_a_users_repository(repo, capsys):
    code, err = init(capsys, repo)
    assert code == 0 and "envkit: wrote envkit.yaml, envkit.mk, Makefile, .gitignore (torch 2.14.1)" in err
    assert "not a git repository" in err  # handled: init needs no git, and says what the images will need
    config = load_config(repo / "envkit.yaml")
    # torch>=2.9: the newest torch that cpu, cuda and tpu-vm all have (2.15 has no CUDA build yet; torch_xla stops at
    # 2.9, so tpu-vm is TorchTPU's and the TPU notebook targets, torch_xla's, are not written)
    assert list(config.targets) == ["cpu", "cuda", "tpu-vm", "colab-t4"]
    assert {target.torch for target in config.targets.values()} == {"2.14.1"}
    assert config.targets["tpu-vm"].backend == "torch_tpu"
    assert all("tabulate==0.9.0" in target.pip_packages for target in config.targets.values())
    table = load_experiments(repo / "envkit.yaml")
    # One experiment per script, on every default target (issue 32 §1), not one per kind.
    assert {name: (e.kind, e.command, e.targets, e.scale) for name, e in table.items()} == {
        "ddp": ("cpu", ("python", "ddp.py"), tuple(config.targets), "torchrun"),  # it reads LOCAL_RANK
        "train": ("cpu", ("python", "train.py"), tuple(config.targets), "single"),
        # top-level code, no main guard, a name init does not know: found by what it is (issue 40 §13)
        "train-dvclive": ("cpu", ("python", "train_dvclive.py"), tuple(config.targets), "single"),
    }
    assert [table["train"].on(target).gpus for target in config.targets.values()] == [
        "none",
        "first",
        "none",
        "first",
    ]
    assert (repo / "Makefile").read_text() == (
        "# envkit's targets: make help lists them.\ninclude envkit.mk\n\n.DEFAULT_GOAL := help\n"
    )
    assert (repo / ".gitignore").read_text() == (
        "# envkit: what envkit makes here (envkit init)\n/.venv*/\n/results/\n/data/\n/.cache/\n/jobs/\n"
    )
    # make train works in the user's repository as make tpu-mnist does here, and TARGET= picks another target
    for target in ("", "cuda", "tpu-vm"):
        done = subprocess.run(
            ["make", "-s", "train", f"ENVKIT={ENVKIT}", "DRY_RUN=1", *([f"TARGET={target}"] if target else [])],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "# 3. experiment train" in done.stdout
        assert f"# 2. build the {target or 'cpu'} image (cached)" in done.stdout


def test_init_twice_changes_nothing_and_never_overwrites(repo, capsys):
    assert init(capsys, repo)[0] == 0
    before = tree(repo)
    code, err = init(capsys, repo)
    assert code == 2 and err == (
        f"envkit: error: {repo / 'envkit.yaml'} exists: envkit init never overwrites a file; "
        "edit it, or move it away and run init again\n"
    )
    assert tree(repo) == before
    (repo / "envkit.yaml").unlink()
    code, err = init(capsys, repo)
    assert (
        code == 2
        and f"{repo / 'envkit.mk'} exists" in err
        and tree(repo) == {k: v for k, v in before.items() if k != "envkit.yaml"}
    )


def test_an_existing_makefile_is_left_alone(repo, capsys):
    (repo / "Makefile").write_text("all:\n\ttrue\n")
    code, err = init(capsys, repo)
    assert code == 0 and "add `include envkit.mk` to your Makefile" in err
    assert (repo / "Makefile").read_text() == "all:\n\ttrue\n"


def test_pyproject_dependencies_and_a_torch_pin_set_the_targets(repo, capsys):
    (repo / "requirements.txt").unlink()
    (repo / "pyproject.toml").write_text('[project]\nname = "mine"\ndependencies = ["torch==2.8.0", "tabulate"]\n')
    (repo / "eval_model.py").write_text('print("no entry point")\n')
    (repo / "sweep.py").write_text('if __name__ == "__main__":\n    pass\n')
    assert init(capsys, repo)[0] == 0
    config = load_config(repo / "envkit.yaml")
    assert re.search(r"^requirements: pyproject.toml$", (repo / "envkit.yaml").read_text(), re.MULTILINE)
    assert {target.torch for target in config.targets.values()} == {"2.8.0"}
    assert list(load_experiments(repo / "envkit.yaml")) == ["ddp", "sweep", "train", "train-dvclive"]


def test_a_requirements_line_no_lock_can_hold_stops_init_before_it_writes(repo, capsys):
    (repo / "requirements.txt").write_text("torch==2.9.0\ngit+https://example.com/lab/tool.git\n")
    before = tree(repo)
    code, err = init(capsys, repo)
    assert code == 2 and err == (
        "envkit: error: requirements.txt:2: 'git+https://example.com/lab/tool.git' is a VCS URL; "
        "a lock holds released packages of an index only: name the package and a version\n"
    )
    assert tree(repo) == before


def test_the_make_include_gets_the_results_folder_as_data(repo, capsys):
    assert init(capsys, repo)[0] == 0
    written = (repo / "envkit.mk").read_text()
    assert f"\nRESULTS_DIR ?= {RESULTS_FOLDER}\n" in written and "{{" not in written
    assert (paths.REPO_ROOT / "templates" / "init" / "envkit.mk").read_text().count("{{ results_folder }}") == 2


def test_the_make_include_names_only_targets_no_experiment_may_take():
    include = (paths.REPO_ROOT / "templates" / "init" / "envkit.mk").read_text()
    phony = re.search(r"^\.PHONY: (.*)$", include, re.MULTILINE).group(1).split()
    assert set(phony) - {"$(ENVKIT_EXPERIMENTS)"} <= set(MAKE_TARGETS)


def test_the_example_project_holds_nothing_of_this_repository():
    ours = {hashlib.sha256(p.read_bytes()).hexdigest() for p in (paths.REPO_ROOT / "recipes").rglob("*.py")}
    assert sorted(p.name for p in EXAMPLE.iterdir()) == [
        "README.md",
        "ddp.py",
        "requirements.txt",
        "train.py",
        "train_dvclive.py",
    ]
    assert not {hashlib.sha256(p.read_bytes()).hexdigest() for p in EXAMPLE.iterdir()} & ours


def test_a_script_named_like_a_make_target_gets_a_name_of_its_own(repo, capsys):
    (repo / "test.py").write_text('if __name__ == "__main__":\n    pass\n')
    assert init(capsys, repo)[0] == 0
    assert list(load_experiments(repo / "envkit.yaml")) == ["ddp", "run-test", "train", "train-dvclive"]


def test_scripts_without_a_main_guard_and_torchrun_scripts_are_found(repo, capsys):
    """Issue 32 §9, §7: before, a train.py of top-level code was 'no entry script', and a DDP script ran without
    torchrun (KeyError: 'LOCAL_RANK')."""
    (repo / "train.py").write_text("import torch\nmodel = torch.nn.Linear(1, 1)\nprint(model(torch.ones(1)))\n")
    (repo / "ddp.py").write_text(
        'import os\nimport torch.distributed as dist\n\n\ndef main():\n    rank = int(os.environ["LOCAL_RANK"])\n'
        '    dist.init_process_group("gloo")\n\n\nif __name__ == "__main__":\n    main()\n'
    )
    (repo / "helpers.py").write_text("def f():\n    return 1\n\n\nprint(f())\n")  # not an entry name: a module
    (repo / "main.py").write_text("def main():\n    pass\n")  # an entry name, but nothing runs
    code, err = init(capsys, repo)
    assert (
        code == 0
        and ('envkit: found ddp.py: an if __name__ == "__main__" guard; reads the rank torchrun gives: scale: torchrun')
        in err
    )
    table = load_experiments(repo / "envkit.yaml")
    assert {name: (e.command, e.scale, e.gpus_rule) for name, e in table.items()} == {
        "ddp": (("python", "ddp.py"), "torchrun", "all"),
        "train": (("python", "train.py"), "single", "first"),
        "train-dvclive": (("python", "train_dvclive.py"), "single", "first"),
    }
    assert "envkit: skipped helpers.py: no __main__ guard, and no top-level code that trains" in err
    assert "envkit: skipped main.py: no __main__ guard, and no top-level code that trains" in err


def test_init_finds_training_scripts_by_what_they_are_and_says_what_it_skipped(repo, capsys):
    """Issue 40 §13: before, train_dvclive.py (top-level code, an unusual name) got no experiment and init said
    nothing; only train.py, main.py, ... were scripts without a main guard."""
    (repo / "fit_lightning.py").write_text(
        "import lightning as L\nfrom model import Net\n\nL.Trainer(max_epochs=1).fit(Net())\n"
    )
    (repo / "steps.py").write_text(
        "import torch\n\nfor _ in range(3):\n    opt = torch.optim.SGD([torch.zeros(1)], lr=0.1)\n    opt.step()\n"
    )
    (repo / "model.py").write_text("import torch\n\n\ndef fit(loss):\n    loss.backward()\n")  # a module
    (repo / "notes.py").write_text("print('no framework')\n")
    (repo / "broken.py").write_text("def f(:\n")
    (repo / "huge.py").write_text("# " + "x" * 2**20 + "\n")
    (repo / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    code, err = init(capsys, repo)
    assert code == 0
    assert list(load_experiments(repo / "envkit.yaml")) == ["ddp", "fit-lightning", "steps", "train", "train-dvclive"]
    assert "envkit: found train_dvclive.py: top-level code that trains (loss.backward())\n" in err
    assert "envkit: found fit_lightning.py: top-level code that trains (Trainer.fit())\n" in err
    assert "envkit: found steps.py: top-level code that trains (opt.step())\n" in err
    skipped = [line for line in err.splitlines() if line.startswith("envkit: skipped")]
    assert skipped == [
        "envkit: skipped broken.py: not Python that parses (line 1)",
        "envkit: skipped huge.py: over 1 MiB: generated or data, not read",
        "envkit: skipped model.py: trains (loss.backward()) but nothing runs at its top level and it has no "
        "__main__ guard: a module",
        "envkit: skipped notes.py: no __main__ guard, and no top-level code that trains",
        "envkit: skipped setup.py: packaging or tests, not a script one runs",
    ]


def test_a_script_that_opens_cuda_only_gets_the_gpu_targets_only(repo, capsys):
    """Issue 40 §14: before, the DDP tutorial's script (torch.cuda.set_device, NCCL only) had cpu as its default
    target, where it fails. The example's ddp.py picks gloo without CUDA: it keeps every target."""
    (repo / "ddp_tutorial.py").write_text(
        "import os\nimport torch\nimport torch.distributed as dist\n\n\ndef main():\n"
        '    local_rank = int(os.environ["LOCAL_RANK"])\n    torch.cuda.set_device(local_rank)\n'
        '    dist.init_process_group(backend="nccl")\n\n\nif __name__ == "__main__":\n    main()\n'
    )
    code, err = init(capsys, repo)
    assert code == 0
    table = load_experiments(repo / "envkit.yaml")
    assert table["ddp-tutorial"].targets == ("cuda", "colab-t4") and table["ddp-tutorial"].scale == "torchrun"
    assert table["ddp"].targets == tuple(load_config(repo / "envkit.yaml").targets)
    assert (
        'envkit: found ddp_tutorial.py: an if __name__ == "__main__" guard; reads the rank torchrun gives: '
        "scale: torchrun; torch.cuda.set_device, nccl with no CPU path: GPU targets only (it fails on cpu)\n"
    ) in err
    assert (
        "    # torch.cuda.set_device, nccl and no CPU path: the GPU targets only\n"
        in (repo / "envkit.yaml").read_text()
    )


def test_torch_follows_the_users_specifier_and_the_gitignore_gets_a_block(repo, capsys):
    (repo / "requirements.txt").write_text("torch<2.10\n")
    (repo / ".gitignore").write_text("*.pyc")
    assert init(capsys, repo)[0] == 0
    config = load_config(repo / "envkit.yaml")
    # 2.9.1 has no TPU build (torch_xla stops at 2.9.0, TorchTPU starts at 2.11): every default target has 2.9.0
    assert {target.torch for target in config.targets.values()} == {"2.9.0"}
    assert list(config.targets) == ["cpu", "cuda", "tpu-vm", "colab-t4", "colab-tpu", "kaggle-tpu"]
    assert (repo / ".gitignore").read_text().startswith("*.pyc\n# envkit: what envkit makes here (envkit init)\n")


def test_the_metrics_hint_works_as_written_on_pytorch_examples_mnist_output(repo, capsys, tmp_path, monkeypatch):
    # An unmodified script that only prints its accuracy (pytorch/examples' mnist) gets metrics null until its
    # experiment names a pattern: envkit.yaml says how, and the pattern it shows, pasted in, reads 57% as 0.57.
    import yaml

    from envkit.project.metric_patterns import metric_variables
    from envkit.support.provenance_output import Matcher

    assert init(capsys, repo)[0] == 0
    text = (repo / "envkit.yaml").read_text()
    (hint,) = [line for line in text.splitlines() if line.lstrip("# ").startswith("metrics:")]
    metrics = yaml.safe_load(hint.lstrip("# ").split("   ")[0])["metrics"]
    config = yaml.safe_load(text)
    config["experiments"]["train"]["metrics"] = metrics
    (repo / "envkit.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert load_experiments(repo / "envkit.yaml")["train"].name == "train"  # the schema takes it
    for name, value in metric_variables("train", metrics).items():
        monkeypatch.setenv(name, value)
    matcher = Matcher.from_environment()
    matcher.feed(b"Train Epoch: 1\n\nTest set: Average loss: 1.1795, Accuracy: 170/300 (57%)\n")
    assert matcher.close() == {"accuracy": 0.57}


def test_a_pip_compile_file_with_hashes_is_read(repo, capsys):
    (repo / "requirements.txt").write_text(
        "# autogenerated by pip-compile\ntabulate==0.9.0 \\\n    --hash=sha256:0095b12bf5966de529c0feb1fa08671671b3368eec77d7ef7ab114be2c068b3c\n"
        "    # via -r requirements.in\ntorch==2.9.0 --hash=sha256:00\n"
    )
    assert init(capsys, repo)[0] == 0
    config = load_config(repo / "envkit.yaml")
    assert "tabulate==0.9.0" in config.targets["cpu"].pip_packages and config.targets["cpu"].torch == "2.9.0"


def test_the_include_at_the_top_of_a_makefile_keeps_its_default_goal(repo, capsys):
    (repo / "Makefile").write_text("include envkit.mk\n\nall:\n\t@echo mine\n")
    assert init(capsys, repo)[0] == 0
    done = subprocess.run(["make", "-s", f"ENVKIT={ENVKIT}"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "mine\n"), done.stderr


def test_a_dangling_link_is_not_replaced(repo, capsys):
    """Issue 33 §14: before, dangling Makefile and envkit.yaml links were replaced by init's files."""
    (repo / "envkit.yaml").symlink_to(repo / "gone")
    before = tree(repo)
    code, err = init(capsys, repo)
    assert code == 2 and f"{repo / 'envkit.yaml'} is a link to nothing: envkit init never overwrites a file" in err
    assert tree(repo) == before and (repo / "envkit.yaml").is_symlink()
    (repo / "envkit.yaml").unlink()
    (repo / "Makefile").symlink_to(repo / "gone")
    code, err = init(capsys, repo)
    assert code == 0 and "add `include envkit.mk` to your Makefile" in err
    assert (repo / "Makefile").is_symlink() and not (repo / "Makefile").exists()


def test_a_bare_repository_is_refused(tmp_path, capsys):
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "bare.git")], check=True)
    before = sorted(p.name for p in (tmp_path / "bare.git").iterdir())
    code, err = init(capsys, tmp_path / "bare.git")
    assert (
        code == 2 and "is a bare git repository (or inside one's .git): run envkit init in a clone's work tree" in err
    )
    assert sorted(p.name for p in (tmp_path / "bare.git").iterdir()) == before


def test_a_deeply_nested_pyproject_is_one_line(repo, capsys):
    (repo / "requirements.txt").unlink()
    (repo / "pyproject.toml").write_text("[project]\nx = " + "[" * 100_000 + "]" * 100_000 + "\n")
    code, err = init(capsys, repo)
    assert code == 2 and err == (
        "envkit: error: pyproject.toml: nested too deep to read; a pyproject.toml nests a few levels\n"
    )


def test_thousands_of_entry_scripts_give_a_config_every_command_reads(repo, capsys):
    for index in range(3200):
        (repo / f"s{index:04d}.py").write_text('if __name__ == "__main__":\n    pass\n')
    code, err = init(capsys, repo)
    assert code == 0 and "envkit: 3203 entry scripts: the first 100 have an experiment" in err
    assert len(load_experiments(repo / "envkit.yaml")) == 100
    assert main(["targets", "--config", str(repo / "envkit.yaml")]) == 0


def test_a_write_that_fails_takes_back_the_others(repo, capsys, monkeypatch):
    from envkit.support import atomic

    real = atomic.write_text_atomic

    def fail_on_the_makefile(path, text):
        if Path(path).name == "Makefile":
            raise PermissionError(13, "Permission denied")
        real(path, text)

    monkeypatch.setattr(atomic, "write_text_atomic", fail_on_the_makefile)
    before = tree(repo)
    code, err = init(capsys, repo)
    assert code == 2 and err.endswith("Makefile: Permission denied; init wrote nothing\n")
    assert tree(repo) == before


def make(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-s", *args, f"ENVKIT={ENVKIT}"], cwd=repo, capture_output=True, text=True, timeout=120
    )


def test_the_make_include_honours_docs_variables_or_stops_in_one_line(repo, capsys):
    """Issue 32 §8: before, envkit.mk ignored ON, NNODES, EPOCHS and RECIPE_PYTHON: ON=slurm ran here."""
    (repo / "ddp.py").write_text(
        'import os\nrank = int(os.environ["LOCAL_RANK"])\nif __name__ == "__main__":\n    pass\n'
    )
    assert init(capsys, repo)[0] == 0
    # gpus: all names no count: GPUS_PER_NODE gives it (without, one line asks for it: tests/launch/test_job.py)
    launched = make(repo, "ddp", "ON=slurm", "NNODES=2", "GPUS_PER_NODE=4", "TARGET=cuda", "DRY_RUN=1")
    assert launched.returncode == 0, launched.stderr
    assert "#SBATCH --nodes=2" in launched.stdout and "doctor --require" not in launched.stdout
    assert "#SBATCH --gpus-per-node=4\n" in launched.stdout
    here = make(repo, "train", "RECIPE_PYTHON=/usr/bin/python3", "DRY_RUN=1")
    assert here.returncode == 0 and "/usr/bin/python3 train.py" in here.stdout, here.stderr
    built = make(repo, "train", "NO_CACHE=1", "BASE_IMAGE=mine:1", "DRY_RUN=1")
    assert "build cpu --no-cache --base-image mine:1" in built.stdout, built.stderr
    refused = make(repo, "train", "EPOCHS=2", "MODEL=resnet50")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "EPOCHS MODEL: flags of envkit's seed recipes, which a project's script does not take" in refused.stderr
    unknown = make(repo, "train", "ON=nope")
    assert unknown.returncode == 2 and "argument --on: invalid choice: 'nope'" in unknown.stderr


def test_envkit_experiment_starts_a_torchrun_script_under_torchrun_here(repo, capsys, tmp_path):
    """Issue 32 §7: before, envkit experiment ran [python, ddp.py] as plain python (KeyError: 'LOCAL_RANK')."""
    assert init(capsys, repo)[0] == 0
    config = str(repo / "envkit.yaml")
    assert main(["experiment", "ddp", "--config", config, "--python", sys.executable, "--dry-run"]) == 0
    assert capsys.readouterr().out.endswith(
        f"{sys.executable} -m torch.distributed.run --standalone --local-addr 127.0.0.1 --nproc-per-node 2 ddp.py\n"
    )
    argv = ["experiment", "ddp", "--config", config, "--python", sys.executable, "--target", "cuda", "--dry-run"]
    assert main(argv) == 0 and "--nproc-per-node gpu ddp.py\n" in capsys.readouterr().out


@pytest.mark.slow
def test_the_ddp_script_runs_on_two_gloo_processes(repo, capsys, tmp_path):
    assert init(capsys, repo)[0] == 0
    results = tmp_path / "results"
    argv = ["experiment", "ddp", "--config", str(repo / "envkit.yaml"), "--python", sys.executable]
    done = subprocess.run(
        [ENVKIT, *argv, "--results-dir", str(results)], cwd=repo, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank 0 of 2: sum=3.0" in done.stdout and "rank 1 of 2: sum=3.0" in done.stdout
