"""The run wrapper (envkit/support/provenance.py, shipped as envkit_run.py): any command gets its results file."""

from __future__ import annotations

import ast
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

from paths import REPO_ROOT
from results_contract import assert_valid_results

from envkit.runs.results import load_results
from envkit.support import provenance, provenance_facts

WRAPPER = Path(provenance.__file__)


def wrapped(tmp_path: Path, *argv: str, **env: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Run ``argv`` through the wrapper from ``tmp_path`` (the project root); its results files, oldest first."""
    environment = {"PATH": os.environ["PATH"], "ENVKIT_RESULTS_DIR": str(tmp_path / "results"), **env}
    done = subprocess.run(
        [sys.executable, str(WRAPPER), *argv], cwd=tmp_path, env=environment, capture_output=True, text=True
    )
    records = [json.loads(path.read_text()) for path in sorted((tmp_path / "results").glob("*.json"))]
    return done, records


def script(tmp_path: Path, body: str) -> str:
    (tmp_path / "train.py").write_text(body)
    return "train.py"


def test_a_script_that_reports_nothing_still_gets_its_status_wall_time_and_environment(tmp_path):
    done, (record,) = wrapped(tmp_path, sys.executable, script(tmp_path, "print('hi')\n"), "--epochs", "1")
    assert done.returncode == 0 and done.stdout == "hi\n"
    run = record["run"]
    assert (run["experiment"], run["argv"][1:], run["exit_status"]) == ("train", ["train.py", "--epochs", "1"], 0)
    assert run["wall_time_s"] >= 0 and record["metrics"] is None and record["series"] == {}
    environment = record["environment"]
    assert environment["python"] == ".".join(map(str, sys.version_info[:3]))
    assert environment["torch"] is not None and any(d.startswith("torch==") for d in environment["distributions"])
    assert record["run_name"].startswith("train-")


def test_a_failed_run_gets_its_results_file_with_its_status(tmp_path):
    done, (record,) = wrapped(
        tmp_path, sys.executable, script(tmp_path, "raise SystemExit(3)\n"), ENVKIT_EXPERIMENT="mine"
    )
    assert done.returncode == 3 and record["run"]["exit_status"] == 3 and record["run"]["experiment"] == "mine"
    (tmp_path / "other").mkdir()
    missing, (record,) = wrapped(tmp_path / "other", "no-such-program-here")
    assert missing.returncode == 127 and record["run"]["exit_status"] == 127
    assert missing.stderr == "envkit_run: error: cannot start no-such-program-here: No such file or directory\n"


def test_the_record_names_the_target_the_run_was_started_as(tmp_path):
    """Before: no run.target, so two cpu-kind targets' host runs pooled into one report row, "cpu on host"."""
    done, (record,) = wrapped(tmp_path, sys.executable, script(tmp_path, "print('hi')\n"), ENVKIT_TARGET="cpu-fast")
    assert done.returncode == 0 and record["run"]["target"] == "cpu-fast"
    (tmp_path / "bare").mkdir()
    done, (record,) = wrapped(tmp_path / "bare", sys.executable, script(tmp_path / "bare", "print('hi')\n"))
    assert done.returncode == 0 and record["run"]["target"] is None


def test_a_dvclive_script_works_unchanged(tmp_path):
    """dvclive has no variable for its folder (Live(dir="dvclive") under the working directory): read from there,
    by a run whose program imported dvclive (a stand-in module here)."""
    body = """\
import json, pathlib, sys, types
sys.modules["dvclive"] = types.ModuleType("dvclive")
live = pathlib.Path("dvclive")
(live / "plots" / "metrics" / "train").mkdir(parents=True)
(live / "plots" / "metrics" / "train" / "loss.tsv").write_text("timestamp\\tstep\\tloss\\n1\\t0\\t2.5\\n2\\t1\\t1.25\\n")
(live / "metrics.json").write_text(json.dumps({"step": 1, "train": {"loss": 1.25}, "accuracy": 0.9}))
"""
    done, (record,) = wrapped(tmp_path, sys.executable, script(tmp_path, body))
    assert done.returncode == 0, done.stderr
    assert record["metrics"] == {"step": 1, "train": {"loss": 1.25}, "accuracy": 0.9}
    assert record["series"] == {"train/loss": {"step": [0, 1], "value": [2.5, 1.25]}}


def test_a_script_may_write_its_metrics_where_envkit_metrics_dir_says(tmp_path):
    body = "import json, os, pathlib\n(pathlib.Path(os.environ['ENVKIT_METRICS_DIR']) / 'metrics.json').write_text('{\"acc\": 0.5}')\n"
    done, (record,) = wrapped(tmp_path, sys.executable, script(tmp_path, body))
    assert done.returncode == 0 and record["metrics"] == {"acc": 0.5}


def test_metrics_that_are_not_an_object_are_one_line_and_the_run_keeps_its_record(tmp_path):
    body = (
        "import os, pathlib\n(pathlib.Path(os.environ['ENVKIT_METRICS_DIR']) / 'metrics.json').write_text('[1, 2]')\n"
    )
    done, (record,) = wrapped(tmp_path, sys.executable, script(tmp_path, body))
    assert done.returncode == 0 and record["metrics"] is None
    assert done.stderr.count("\n") == 1 and "holds a list, not an object of metrics" in done.stderr


def test_a_program_that_writes_its_own_record_keeps_it_and_gains_the_run_block(tmp_path):
    """The seed recipes write <results>/<recipe>-<run>.json: the wrapper adds to it rather than writing a second file."""
    body = (
        "import json, os, pathlib\nresults = pathlib.Path(os.environ['ENVKIT_RESULTS_DIR'])\n"
        "(results / 'mnist-cpu.json').write_text(json.dumps({'recipe': 'mnist', 'run_id': os.environ['ENVKIT_RUN_ID']}))\n"
        "(results / 'mnist-other.json').write_text(json.dumps({'recipe': 'mnist', 'run_id': 'ab' * 16}))\n"
    )
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "old.json").write_text('{"recipe": "cifar"}')
    done, records = wrapped(tmp_path, sys.executable, script(tmp_path, body), "--epochs", "2")
    assert done.returncode == 0, done.stderr
    names = ["mnist-cpu.json", "mnist-other.json", "old.json"]
    assert sorted(path.name for path in (tmp_path / "results").iterdir()) == names
    assert records[0]["recipe"] == "mnist" and records[0]["run"]["argv"][1:] == ["train.py", "--epochs", "2"]
    assert records[0]["run"]["run_id"] == records[0]["run_id"]
    assert records[1] == {"recipe": "mnist", "run_id": "ab" * 16}, "another run's record, written meanwhile, is left"
    assert records[2] == {"recipe": "cifar"}, "a record of an earlier run is left alone"


def test_without_a_command_it_says_how_to_use_it(tmp_path):
    done, records = wrapped(tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("usage: envkit_run.py COMMAND") and records == []


def test_the_wrapper_needs_the_standard_library_alone():
    """It runs in images and notebooks where envkit is not installed: the standard library and its own modules,
    which ship beside it."""
    files = provenance.shipped()
    assert list(files)[0] == provenance.FILE_NAME and len(files) == len(provenance.MODULES) + 1
    imported = set()
    for path in files.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    allowed = set(sys.stdlib_module_names) | {"__future__", *provenance.MODULES}
    assert imported - allowed == set() and set(provenance.MODULES) <= imported


def test_the_wrapper_runs_from_its_shipped_files_alone(tmp_path):
    """As in an image's /opt/envkit/ or a notebook's folder: its files copied under their shipped names, nothing
    of envkit importable."""
    shipped = tmp_path / "opt"
    shipped.mkdir()
    for name, path in provenance.shipped().items():
        (shipped / name).write_bytes(path.read_bytes())
    env = {"PATH": os.environ["PATH"], "ENVKIT_RESULTS_DIR": str(tmp_path / "results")}
    command = [sys.executable, "-I", str(shipped / provenance.FILE_NAME), sys.executable, "-c", "print('hi')"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    (record,) = [json.loads(path.read_text()) for path in (tmp_path / "results").glob("*.json")]
    assert done.returncode == 0 and done.stdout == "hi\n", done.stderr
    assert record["run"]["exit_status"] == 0 and record["environment"]["python"] == platform.python_version()


def test_only_the_first_node_of_a_multi_node_run_records_it(tmp_path):
    """Engines start the wrapper on every node: one record per run, not one per node."""
    body = "raise SystemExit(4)\n"
    done, records = wrapped(tmp_path, sys.executable, script(tmp_path, body), SLURM_NODEID="1")
    assert done.returncode == 4 and records == [] and not (tmp_path / "results").exists()
    done, records = wrapped(tmp_path, sys.executable, script(tmp_path, body), SLURM_NODEID="0", NODE_RANK="0")
    assert done.returncode == 4 and len(records) == 1


def test_the_wrapper_owns_the_process_facts_and_a_recipe_record_keeps_what_torch_told_it(tmp_path):
    """One owner for a run's environment: a recipe's harness writes the device and torch's build, the wrapper
    that adopts the record adds host, Python, image, lock, git and distributions."""
    body = (
        "import json, os, pathlib\n"
        "record = {'recipe': 'mnist', 'run_id': os.environ['ENVKIT_RUN_ID'],\n"
        "          'environment': {'device_type': 'cuda', 'device_name': 'H100', 'device_count': 8, 'torch': '9.9'}}\n"
        "(pathlib.Path(os.environ['ENVKIT_RESULTS_DIR']) / 'mnist-x.json').write_text(json.dumps(record))\n"
    )
    done, (record,) = wrapped(
        tmp_path, sys.executable, script(tmp_path, body), ENVKIT_IMAGE="envkit-cpu:abc", ENVKIT_REVISION="abc1234"
    )
    assert done.returncode == 0, done.stderr
    environment = record["environment"]
    assert (environment["device_type"], environment["device_name"], environment["device_count"]) == ("cuda", "H100", 8)
    assert environment["torch"] == "9.9", "the program's own fact is kept over the wrapper's look-up"
    assert (environment["image"], environment["git_revision"]) == ("envkit-cpu:abc", "abc1234")
    assert environment["python"] == platform.python_version() and environment["host"] == socket.gethostname()
    assert any(entry.startswith("pytest==") for entry in environment["distributions"])


def test_the_cpu_s_model_is_looked_up_in_one_place():
    """The wrapper's device_name names the CPU, one rule for every record (a recipe's harness, which looked it up too
    with another fallback, leaves it to the wrapper: tests/recipes/test_harness.py)."""
    sources = [*(REPO_ROOT / "envkit").rglob("*.py"), *(REPO_ROOT / "recipes").rglob("*.py")]
    readers = [
        path.relative_to(REPO_ROOT).as_posix() for path in sorted(sources) if "/proc/cpuinfo" in path.read_text()
    ]
    assert readers == ["envkit/support/provenance_facts.py"]


def test_image_lock_and_digest_come_from_the_image_and_values_that_are_none_are_null(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "prefix", str(tmp_path))  # a venv made from no lock
    monkeypatch.setenv("ENVKIT_LOCK_SHA256", "ab" * 32)
    monkeypatch.setenv("ENVKIT_IMAGE_ID", "sha256:" + "cd" * 32)
    monkeypatch.setenv("ENVKIT_IMAGE_DIGEST", "sha256:" + "ef" * 32)
    environment = provenance_facts.environment()
    assert environment["lock_sha256"] == "ab" * 32 and environment["image_id"] == "sha256:" + "cd" * 32
    assert environment["image_digest"] == "sha256:" + "ef" * 32
    distributions = environment["distributions"]
    assert distributions == sorted(set(distributions)) and any(entry.startswith("torch==") for entry in distributions)
    names = [entry.split("==")[0] for entry in distributions]
    assert all(name == name.lower() and "_" not in name and "." not in name for name in names)
    monkeypatch.setenv("ENVKIT_LOCK_SHA256", "not a sha")
    monkeypatch.setenv("ENVKIT_IMAGE_ID", "")
    monkeypatch.setenv("ENVKIT_IMAGE_DIGEST", "latest")
    environment = provenance_facts.environment()
    assert (environment["lock_sha256"], environment["image_id"], environment["image_digest"]) == (None, None, None)
    assert environment["torch_tpu"] is None and "torch_tpu" not in sys.modules  # looked up, never imported


def test_a_run_on_the_host_names_the_lock_its_venv_was_made_from(monkeypatch, tmp_path):
    from envkit.host.venv import MARKER

    assert provenance_facts.VENV_LOCK_MARKER == MARKER
    monkeypatch.delenv("ENVKIT_LOCK_SHA256", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    (tmp_path / MARKER).write_text(json.dumps({"lock": "/x/requirements.lock", "lock_sha256": "ef" * 32}))
    assert provenance_facts.lock_sha256() == "ef" * 32
    monkeypatch.setenv("ENVKIT_LOCK_SHA256", "ab" * 32)  # an image's own lock wins
    assert provenance_facts.lock_sha256() == "ab" * 32
    monkeypatch.delenv("ENVKIT_LOCK_SHA256")
    for broken in ("not json", json.dumps(["ef" * 32]), json.dumps({"lock_sha256": "not a sha"})):
        (tmp_path / MARKER).write_text(broken)
        assert provenance_facts.lock_sha256() is None


def test_git_revision_is_the_full_hash_here_and_null_when_no_hash(monkeypatch):
    monkeypatch.delenv("ENVKIT_REVISION", raising=False)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    if head.returncode == 0:  # a checkout (not an unpacked archive): the same 40 hex digits git names
        assert provenance_facts.git_state()[0] == head.stdout.strip() and len(head.stdout.strip()) == 40
    monkeypatch.setenv("ENVKIT_REVISION", "unknown")  # what images of older envkit releases set without git
    assert provenance_facts.git_state() == (None, None)
    monkeypatch.setenv("ENVKIT_REVISION", "abc12")  # shorter than any abbreviation git gives
    assert provenance_facts.git_state() == (None, None)
    monkeypatch.setenv("ENVKIT_REVISION", "0123456789abcdef0123456789abcdef01234567")
    assert provenance_facts.git_state() == ("0123456789abcdef0123456789abcdef01234567", None)


def test_git_state_asks_git_once_for_the_commit_and_the_changed_tracked_files(tmp_path, monkeypatch):
    """Issue 42 goal 2: two gits after every run (rev-parse, then status); one now. Untracked files are not a change,
    and a repository without a commit has no revision."""
    monkeypatch.delenv("ENVKIT_REVISION", raising=False)
    monkeypatch.chdir(tmp_path)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], check=True)
    started = []
    run = provenance_facts.subprocess.run
    monkeypatch.setattr(provenance_facts.subprocess, "run", lambda argv, **kw: started.append(argv) or run(argv, **kw))

    def state() -> tuple:
        started.clear()
        found = provenance_facts.git_state()
        assert len(started) == 1, started
        return found

    assert state() == (None, None)  # no commit yet
    (tmp_path / "train.py").write_text("print(1)\n")
    subprocess.run([*git, "add", "train.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / "notes.txt").write_text("untracked\n")
    assert state() == (head, False)
    (tmp_path / "train.py").write_text("print(2)\n")
    assert state() == (head, True)


def test_the_wrapper_checks_values_by_the_results_schemas_own_patterns():
    """One schema, one pattern: the wrapper cannot read envkit/data where it runs, so its copies are held equal."""
    schema = json.loads((Path(provenance.__file__).parents[1] / "data" / "results.schema.json").read_text())
    environment = schema["properties"]["environment"]["properties"]
    assert provenance_facts._REVISION == environment["git_revision"]["pattern"]
    assert provenance_facts._SHA256 == environment["lock_sha256"]["pattern"]
    assert provenance_facts._DIGEST == environment["image_digest"]["pattern"]


def test_a_killed_wrapper_leaves_its_log_and_a_running_record_the_report_counts_and_its_program_dies(tmp_path):
    """Before: kill -9 of the wrapper left stdout.log empty (block-buffered) and no record, and the program ran on."""
    body = "import os, time\nprint(os.getpid())\nfor n in range(600):\n    print(f'line {n}')\n    time.sleep(0.1)\n"
    results = tmp_path / "results"
    wrapper = subprocess.Popen(
        [sys.executable, str(WRAPPER), sys.executable, script(tmp_path, body)],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "ENVKIT_RESULTS_DIR": str(results)},
        stdout=subprocess.DEVNULL,
    )
    for _ in range(600):
        log = next(results.glob("*/stdout.log"), None)
        if log and "line 2\n" in log.read_text():
            break
        time.sleep(0.1)
    wrapper.kill()
    wrapper.wait(30)
    assert log is not None, "the run's log was made as it started"
    lines = log.read_text().splitlines()
    assert lines[1:4] == ["line 0", "line 1", "line 2"], "the log holds what the program printed"
    for _ in range(100):  # the program gets SIGKILL with its wrapper (a zombie until reaped is dead too)
        state = Path(f"/proc/{lines[0]}/stat")
        if not state.exists() or state.read_text().rpartition(")")[2].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the program (pid {lines[0]}) outlived its wrapper")
    (path,) = results.glob("*.json")
    record = assert_valid_results(path)
    assert (record["run"]["status"], record["run"]["exit_status"]) == ("running", None)
    # where it runs, as far as known at once: its row and environment are its siblings'
    assert record["environment"]["python"] == platform.python_version() and not record["run"]["device"]["observed"]
    (run,), warnings = load_results(results)
    assert run.state == "killed or lost" and not run.succeeded
    assert warnings == [f"{path}: {run.outcome}: counted among the failed runs, left out of the numbers"]
    assert f"killed or lost (its wrapper, pid {wrapper.pid} on {socket.gethostname()}" in run.outcome
