"""`envkit launch EXPERIMENT --on kaggle` against a fake kaggle CLI on PATH: nothing reaches Kaggle.

The fake records its arguments, checks what `kernels push -p` is given, answers `kernels
status` RUNNING then COMPLETE (or ERROR), and `kernels output` writes a results file
where it was told to. One run goes through a real subprocess in an empty network
namespace (`unshare -n`), so no code path can have needed the network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from paths import DATA

from envkit.cli import main

FAKE_KAGGLE = """#!{python}
import json, os, sys, pathlib
state = pathlib.Path(os.environ["FAKE_KAGGLE_STATE"])
state.mkdir(exist_ok=True)
with open(state / "calls.jsonl", "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
mode = os.environ.get("FAKE_KAGGLE_MODE", "ok")
if mode == "refused":
    print("Authentication required to call the Kaggle API.\\n\\nFirst, you will need a Kaggle account.")
    sys.exit(1)
command, args = sys.argv[1:3], sys.argv[3:]
if command == ["kernels", "push"]:
    folder = pathlib.Path(args[args.index("-p") + 1])
    meta = json.loads((folder / "kernel-metadata.json").read_text())
    json.loads((folder / meta["code_file"]).read_text())  # a notebook
    print("Kernel version 1 successfully pushed.")
elif command == ["kernels", "status"]:
    polls = state / "polls"
    count = int(polls.read_text()) + 1 if polls.exists() else 1
    polls.write_text(str(count))
    final = "ERROR" if mode == "error" else "COMPLETE"
    print('%s has status "KernelWorkerStatus.%s"' % (args[0], "RUNNING" if count == 1 else final))
elif command == ["kernels", "output"]:
    folder = pathlib.Path(args[args.index("-p") + 1]) / "results"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mnist-tpu-x8-xmp.json").write_text(pathlib.Path(os.environ["FAKE_KAGGLE_RESULT"]).read_text())
    print("Output file downloaded to", folder)
else:
    sys.exit("fake kaggle: unexpected " + " ".join(sys.argv[1:]))
"""
RESULT = DATA / "results" / "backends" / "mnist-tpu-xla-xmp.json"


@pytest.fixture()
def kaggle(tmp_path, monkeypatch):
    """A fake kaggle CLI first on PATH, a logged-in user, and an empty HOME."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kaggle"
    fake.write_text(FAKE_KAGGLE.format(python=sys.executable))
    fake.chmod(0o755)
    for key in [key for key in os.environ if key.startswith("KAGGLE_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KAGGLE_API_TOKEN", "not-a-real-token")
    monkeypatch.setenv("FAKE_KAGGLE_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("FAKE_KAGGLE_RESULT", str(RESULT))
    return tmp_path / "state"


def calls(state: Path) -> list[list[str]]:
    log = state / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def launch(capsys, repo_root, tmp_path, *extra: str) -> tuple[int, str, str]:
    argv = [
        "launch",
        "tpu-mnist",
        "--on",
        "kaggle",
        "--config",
        str(repo_root / "envkit.yaml"),
        "--kaggle-user",
        "student",
        "--output",
        str(tmp_path / "jobs"),
        "--results-dir",
        str(tmp_path / "results"),
        "--poll",
        "1",
        *extra,
    ]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_prints_the_metadata_and_the_kaggle_commands(capsys, repo_root, kaggle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(
        [
            "launch",
            "tpu-mnist",
            "--on",
            "kaggle",
            "--config",
            str(repo_root / "envkit.yaml"),
            "--kaggle-user",
            "student",
            "--dry-run",
        ]
    )
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "# --- file jobs/envkit-tpu-mnist/kernel-metadata.json"
    metadata = json.loads("\n".join(lines[1 : lines.index("# --- submit") - 1]))
    assert metadata == {
        "id": "student/envkit-tpu-mnist",
        "title": "envkit tpu mnist",
        "code_file": "tpu-mnist.ipynb",
        "language": "python",
        "kernel_type": "notebook",
        "is_private": "true",
        "enable_gpu": "false",
        "enable_tpu": "true",
        "enable_internet": "true",
        "machine_shape": "TpuV5E8",
        "dataset_sources": [],
        "competition_sources": [],
        "kernel_sources": [],
        "model_sources": [],
    }
    assert lines[lines.index("# --- submit") + 1 :] == [
        "kaggle kernels push -p jobs/envkit-tpu-mnist",
        "# then every 60 s until it completes: kaggle kernels status student/envkit-tpu-mnist",
        "kaggle kernels output student/envkit-tpu-mnist -p results/kaggle/envkit-tpu-mnist --file-pattern '.*\\.json$' -o",
        "# results: under results/kaggle/envkit-tpu-mnist (then: envkit report DIR)",
    ]
    assert calls(kaggle) == [] and not Path("jobs").exists()


def test_push_waits_and_fetches_the_results(capsys, repo_root, kaggle, tmp_path):
    code, _, err = launch(capsys, repo_root, tmp_path)
    assert code == 0, err
    folder = tmp_path / "jobs" / "envkit-tpu-mnist"
    assert calls(kaggle) == [
        ["kernels", "push", "-p", str(folder)],
        ["kernels", "status", "student/envkit-tpu-mnist"],
        ["kernels", "status", "student/envkit-tpu-mnist"],
        [
            "kernels",
            "output",
            "student/envkit-tpu-mnist",
            "-p",
            str(tmp_path / "results" / "kaggle" / "envkit-tpu-mnist"),
            "--file-pattern",
            ".*\\.json$",
            "-o",
        ],
    ]
    # the notebook pushed is the committed one, beside metadata that asks for its accelerator
    assert (folder / "tpu-mnist.ipynb").read_text() == (
        repo_root / "notebooks" / "kaggle-tpu" / "tpu-mnist.ipynb"
    ).read_text()
    assert json.loads((folder / "kernel-metadata.json").read_text())["machine_shape"] == "TpuV5E8"
    fetched = tmp_path / "results" / "kaggle" / "envkit-tpu-mnist" / "results"
    assert "envkit: 1 results file(s) from student/envkit-tpu-mnist in " in err and f"envkit report {fetched}" in err
    assert main(["report", str(fetched)]) == 0


def test_a_failed_run_is_one_line_exit_1(capsys, repo_root, kaggle, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_KAGGLE_MODE", "error")
    code, _, err = launch(capsys, repo_root, tmp_path)
    assert code == 1 and err.splitlines()[-1].startswith(
        "envkit: error: student/envkit-tpu-mnist ended with status ERROR"
    )


def test_missing_cli_is_one_line_exit_2_and_writes_nothing(capsys, repo_root, kaggle, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    code, out, err = launch(capsys, repo_root, tmp_path)
    assert (code, out) == (2, "") and err == (
        "envkit: error: the kaggle CLI is not on PATH: pip install kaggle (then "
        "kaggle auth login), or push --dry-run's files yourself\n"
    )
    assert not (tmp_path / "jobs").exists()


def test_no_login_is_one_line_exit_2_and_nothing_is_pushed(capsys, repo_root, kaggle, tmp_path, monkeypatch):
    monkeypatch.delenv("KAGGLE_API_TOKEN")
    code, out, err = launch(capsys, repo_root, tmp_path)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith("envkit: error: the kaggle CLI is not authenticated: run `kaggle auth login`")
    assert calls(kaggle) == [] and not (tmp_path / "jobs").exists()
    # a login in kaggle-cli's config folder counts
    (tmp_path / "home" / ".kaggle").mkdir(parents=True)
    (tmp_path / "home" / ".kaggle" / "access_token").write_text("x")
    assert launch(capsys, repo_root, tmp_path)[0] == 0


def test_credentials_kaggle_refuses_are_one_line_exit_2(capsys, repo_root, kaggle, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_KAGGLE_MODE", "refused")
    code, _, err = launch(capsys, repo_root, tmp_path)
    assert code == 2 and err.splitlines()[-1] == (
        "envkit: error: the kaggle CLI is not authenticated (Kaggle refused its credentials): run `kaggle auth login`"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["tpu-mnist", "--kaggle-user", "student", "--target", "colab-tpu"],
            "target colab-tpu is not a Kaggle notebook target",
        ),
        (["gpu-mnist", "--kaggle-user", "student"], "has no Kaggle notebook target for gpu-mnist (cuda)"),
        (["tpu-mnist"], "name the Kaggle account the notebook goes to: --kaggle-user NAME (or KAGGLE_USERNAME)"),
        (
            ["tpu-mnist", "--kaggle-user", "student", "--nodes", "2"],
            "--on kaggle runs the experiment's notebook as rendered",
        ),
        (["tpu-mnist", "--kaggle-user", "student", "--name", "Bad Name"], "a Kaggle notebook slug is"),
        # Before: accepted and silently dropped (the notebook runs as rendered)
        (
            ["tpu-mnist", "--kaggle-user", "student", "--env", "WANDB_API_KEY=x"],
            "--on kaggle runs the experiment's notebook as rendered, which --env cannot reach (WANDB_API_KEY)",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, repo_root, kaggle, argv, message):
    code = main(
        ["launch", *argv[:1], "--on", "kaggle", *argv[1:], "--config", str(repo_root / "envkit.yaml"), "--dry-run"]
    )
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.count("\n") == 1 and message in err, err


def test_the_whole_launch_needs_no_network(repo_root, kaggle, tmp_path):
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("'unshare -n' cannot make an empty network namespace here (needs root or user namespaces)")
    done = subprocess.run(
        [
            "unshare",
            "-n",
            sys.executable,
            "-m",
            "envkit",
            "launch",
            "tpu-mnist",
            "--on",
            "kaggle",
            "--kaggle-user",
            "student",
            "--config",
            str(repo_root / "envkit.yaml"),
            "--output",
            str(tmp_path / "jobs"),
            "--results-dir",
            str(tmp_path / "results"),
            "--poll",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(repo_root)},
    )
    assert done.returncode == 0, done.stderr
    assert [call[:2] for call in calls(kaggle)] == [
        ["kernels", "push"],
        ["kernels", "status"],
        ["kernels", "status"],
        ["kernels", "output"],
    ]


def test_the_account_comes_from_kaggle_json_where_no_user_is_named(capsys, repo_root, kaggle, tmp_path):
    (tmp_path / "home" / ".kaggle").mkdir(parents=True)
    (tmp_path / "home" / ".kaggle" / "kaggle.json").write_text('{"username": "from-file", "key": "x"}')
    code = main(["launch", "tpu-mnist", "--on", "kaggle", "--config", str(repo_root / "envkit.yaml"), "--dry-run"])
    assert code == 0 and '"id": "from-file/envkit-tpu-mnist"' in capsys.readouterr().out
