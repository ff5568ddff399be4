"""`envkit launch`: each engine's rendering (golden files), bad input, submission through fake clients."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import paths
import pytest
from launch_jobs import CASES, DIGEST, FAKE_DATA, IMAGE_ID, OUTPUT, make_job, project, record_push, run, save_manifest
from paths import REPO_ROOT, TESTS

from envkit.cli import main
from envkit.launch import engines, slurm
from envkit.launch.plan import describe

GOLDEN = paths.GOLDEN / "launch"


def test_every_engine_is_registered_by_its_name():
    assert all(name == engine.name for name, engine in engines.REGISTRY.items())


@pytest.mark.parametrize("case", sorted(CASES))
def test_dry_run_matches_golden(case, update_golden):
    engine, job = CASES[case]()
    text = describe(engines.render_job(engine, job, OUTPUT))
    golden = GOLDEN / f"{case}.txt"
    if update_golden:
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden.name} differs; rerun with --update-golden if intended"


def test_rendering_is_deterministic():
    """Every case rendered in two interpreters with different hash seeds (set and dict orders differ) is the same text."""
    script = (
        "import sys; from launch_jobs import CASES, OUTPUT; from envkit.launch import engines;"
        "from envkit.launch.plan import describe;"
        "sys.stdout.write(''.join(describe(engines.render_job(*CASES[c](), OUTPUT)) for c in sorted(CASES)))"
    )

    def rendered(seed: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO_ROOT)])}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
        return done.stdout

    first = rendered("0")
    assert first == rendered("4242") and first.count("# results: ") == len(CASES)


def test_slurm_script_asks_for_what_the_issue_names():
    script = slurm.sbatch_script(make_job("gpu-ddp-cifar", "slurm", gpus_per_node=4))
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=4\n" in script
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1' in script
    assert "sacct" not in script


def test_single_host_experiment_runs_without_torchrun():
    job = make_job("gpu-dp-cifar", "slurm", nodes=1, gpus_per_node=4, options=dict(container="host"))
    wrapper = "python /srv/envkit/docker/cuda/envkit_run.py"  # the run wrapper beside run.sh writes the results
    assert f"srun --ntasks-per-node=1 --chdir=/srv/envkit {wrapper} python recipes/cifar.py" in slurm.sbatch_script(job)
    in_image = slurm.sbatch_script(make_job("gpu-dp-cifar", "slurm", nodes=1, gpus_per_node=4))
    assert " envkit-cuda:latest python /opt/envkit/envkit_run.py python recipes/cifar.py" in in_image


def test_slurm_runs_the_image_under_podman_by_default():
    assert slurm.ENGINE.settings({}).container == "podman"
    script = slurm.sbatch_script(make_job("cpu-ddp-cifar", "slurm"))
    assert "container podman." in script and "\nsrun --ntasks-per-node=1 podman run " in script
    assert "export ENVKIT_DATA_DIR=/workspace/data\n" in script and " -e ENVKIT_DATA_DIR " in script
    assert "recipes/cifar.py --device cpu --parallel ddp\n" in script, "nothing added to the recipe's arguments"


# ------------------------------------------------------------------ the command line


BAD_INPUT = {
    "nodes below 1": (["gpu-ddp-cifar", "--on", "slurm", "--nodes", "0"], "--nodes 0"),
    "too many GPUs (first)": (["gpu-mnist", "--on", "slurm", "--gpus-per-node", "2"], "give 1"),
    "GPUs for a CPU experiment": (["cpu-ddp-cifar", "--on", "slurm", "--gpus-per-node", "1"], "give 0"),
    "unknown engine": (["gpu-ddp-cifar", "--on", "nomad"], "invalid choice"),
    "not DNS-1123": (["gpu-ddp-cifar", "--on", "pytorchjob", "--name", "GPU_job"], "DNS-1123"),
    "DNS-1123 from the experiment name": (["gpu-ddp-cifar", "--on", "jobset", "--name", "a" * 64], "DNS-1123"),
    "tpu-pod without zone": (["tpu-mnist", "--on", "tpu-pod", "--tpu", "my-v4"], "--zone ZONE"),
    "tpu-pod without name": (["tpu-mnist", "--on", "tpu-pod", "--zone", "us-central2-b"], "--tpu NAME"),
    "single-host experiment on 2 nodes": (["gpu-dp-cifar", "--on", "slurm", "--nodes", "2"], "one host only"),
    "engine without the hardware": (
        ["gpu-ddp-cifar", "--on", "tpu-pod", "--tpu", "t", "--zone", "z"],
        "engines for it",
    ),
    "TPU experiment on Slurm": (["tpu-mnist", "--on", "slurm"], "engines for it"),
    "unknown experiment": (["gpu-xyz", "--on", "slurm"], "unknown experiment"),
    "hosts without names": (["cpu-ddp-cifar", "--on", "hosts", "--nodes", "2"], "--hosts"),
    "pyxis without a registry": (["gpu-ddp-cifar", "--on", "slurm", "--container", "pyxis"], "--registry"),
    "apptainer without a tarball": (["gpu-ddp-cifar", "--on", "slurm", "--container", "apptainer"], "--image-tarball"),
    "newline in a Slurm value": (["gpu-ddp-cifar", "--on", "slurm", "--partition", "gpu\n#SBATCH --x"], "--partition"),
    "nproc for a GPU experiment": (["gpu-ddp-cifar", "--on", "slurm", "--nproc-per-node", "2"], "--nproc-per-node"),
    "TPU JobSet without selectors": (["tpu-mnist", "--on", "jobset"], "--tpu-topology"),
    "stop on another engine": (["gpu-ddp-cifar", "--on", "slurm", "--stop"], "--stop"),
    "env without a value": (["cpu-ddp-cifar", "--on", "slurm", "--env", "GLOO_SOCKET_IFNAME"], "is not NAME=VALUE"),
    "env name a shell would run": (
        ["cpu-ddp-cifar", "--on", "slurm", "--env", "X;touch /tmp/x=1"],
        "is not NAME=VALUE",
    ),
    "env name with a newline": (["cpu-ddp-cifar", "--on", "jobset", "--env", "A\nB=1"], "is not NAME=VALUE"),
    "env given twice": (["cpu-ddp-cifar", "--on", "slurm", "--env", "A=1", "--env", "A=2"], "given twice"),
    "env envkit sets": (["cpu-ddp-cifar", "--on", "slurm", "--env", "NNODES=4"], "from --nodes"),
    "env the engine sets": (["cpu-ddp-cifar", "--on", "pytorchjob", "--env", "PET_NNODES=4"], "PET_*"),
    "env envkit sets from the push record": (
        ["cpu-ddp-cifar", "--on", "jobset", "--env", "ENVKIT_IMAGE_ID=x"],
        "--registry",
    ),
    "launch by digest, never pushed": (
        ["cpu-ddp-cifar", "--on", "jobset", "--registry", "reg.example:5000"],
        "launch by digest: envkit-cpu:latest was never pushed to reg.example:5000",
    ),
    "a tarball without its manifest": (
        ["cpu-ddp-cifar", "--on", "slurm", "--image-tarball", "x.tar.gz"],
        "no x.manifest.json",
    ),
    # Before: these reached the manifest or the client, and failed only where the job ran.
    "registry push refuses": (
        ["gpu-ddp-cifar", "--on", "pytorchjob", "--registry", "reg example"],
        "--registry 'reg example' is not valid: give HOST[:PORT][/PATH] in lowercase",
    ),
    "tag with a colon": (["gpu-ddp-cifar", "--on", "pytorchjob", "--tag", "v1:x"], "--tag 'v1:x' is not valid"),
    "image with a space": (
        ["gpu-ddp-cifar", "--on", "jobset", "--image", "lab/envkit cuda"],
        "is not a valid reference",
    ),
    "TPU name a shell would split": (
        ["tpu-mnist", "--on", "tpu-pod", "--tpu", "x;id", "--zone", "us-central2-b"],
        "--tpu 'x;id' is not valid: give a TPU VM name",
    ),
    "zone that is no zone": (
        ["tpu-mnist", "--on", "tpu-pod", "--tpu", "t", "--zone", "us central"],
        "--zone 'us central'",
    ),
    "accelerator count that is no number": (
        ["gpu-ddp-cifar", "--on", "skypilot", "--accelerators", "A100:x"],
        "--accelerators 'A100:x' is not valid: give NAME[:COUNT]",
    ),
    "TPU topology that is no topology": (
        ["tpu-mnist", "--on", "jobset", "--tpu-accelerator", "tpu-v5-lite-podslice", "--tpu-topology", "4*4"],
        "--tpu-topology '4*4'",
    ),
    "volume claim that is no name": (
        ["gpu-ddp-cifar", "--on", "pytorchjob", "--volume-claim", "My Claim"],
        "--volume-claim",
    ),
    "recipe arguments against the experiment": (
        ["gpu-ddp-cifar", "--on", "slurm", "--", "--parallel", "dp"],
        "gpu-ddp-cifar runs with --parallel ddp",
    ),
    "output for plain hosts": (["cpu-ddp-cifar", "--on", "hosts"], "--output: --on hosts writes no files"),
    "an experiment of several runs": (
        ["e3-batch-scaling", "--on", "tpu-pod", "--tpu", "t", "--zone", "z"],
        "e3-batch-scaling is 4 recipe runs, and envkit launch submits one",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
@pytest.mark.parametrize("dry_run", [True, False])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, dry_run, capsys, project):
    argv, expected = BAD_INPUT[case]
    code, out, err = run(capsys, "launch", *argv, "--output", str(project / "out"), *(["--dry-run"] if dry_run else []))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and expected in err, err
    assert sorted(p.name for p in project.iterdir()) == ["envkit.yaml"]


def fake_client(bin_dir: Path, name: str, exit_code: int = 0, message: str = "") -> Path:
    """A client that records its arguments (one per line, NUL-free) and answers like the real one."""
    bin_dir.mkdir(exist_ok=True)
    log = bin_dir / f"{name}.calls"
    script = bin_dir / name
    script.write_text(
        "#!/bin/bash\n"
        f'printf "%s\\0" "$@" >> {shlex.quote(str(log))}\nprintf "\\n" >> {shlex.quote(str(log))}\n'
        f"echo {shlex.quote(message)} >&2\nexit {exit_code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return log


def calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [entry.split("\0") for entry in log.read_text().split("\0\n") if entry]


@pytest.fixture()
def fake_path(tmp_path, monkeypatch):
    # The fake clients alone: this machine has real sbatch, kubectl and gcloud in /usr/bin,
    # and none of them may run from a test.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


@pytest.mark.parametrize(
    "engine, argv, client, file",
    [
        ("slurm", ["gpu-ddp-cifar", "--gpus-per-node", "2"], "sbatch", "gpu-ddp-cifar.sbatch"),
        ("pytorchjob", ["gpu-ddp-cifar"], "kubectl", "gpu-ddp-cifar.pytorchjob.yaml"),
        ("jobset", ["cpu-ddp-cifar"], "kubectl", "cpu-ddp-cifar.jobset.yaml"),
        ("skypilot", ["gpu-ddp-cifar"], "sky", "gpu-ddp-cifar.sky.yaml"),
    ],
)
def test_submit_writes_the_file_and_calls_the_client(engine, argv, client, file, capsys, project, fake_path):
    log = fake_client(fake_path, client)
    code, _, err = run(capsys, "launch", *argv, "--on", engine, "--nodes", "2", "--output", "out")
    assert code == 0, err
    written = project / "out" / file
    assert written.is_file() and "results:" in err
    assert [c[-1] for c in calls(log)] == [f"out/{file}"]
    assert not [p for p in (project / "out").iterdir() if p.name.startswith(".")]  # no temp files left


@pytest.mark.parametrize("client, engine", [("sbatch", "slurm"), ("kubectl", "pytorchjob"), ("sky", "skypilot")])
def test_failed_submission_is_one_line_with_the_clients_message(client, engine, capsys, project, fake_path):
    fake_client(fake_path, client, exit_code=1, message="error: the server could not be reached")
    code, _, err = run(capsys, "launch", "gpu-ddp-cifar", "--on", engine, "--nodes", "2")
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"envkit: error: {client} failed (exit 1)") and "could not be reached" in last


def test_missing_client_is_one_line(capsys, project, fake_path):
    code, _, err = run(capsys, "launch", "gpu-ddp-cifar", "--on", "slurm", "--nodes", "2")
    assert code == 2 and err.count("\n") == 1 and "sbatch not found" in err


def test_dry_run_writes_nothing_without_output(capsys, project):
    code, out, _ = run(capsys, "launch", "gpu-ddp-cifar", "--on", "slurm", "--nodes", "2", "--dry-run")
    assert code == 0 and "#SBATCH --nodes=2" in out and "sbatch jobs/gpu-ddp-cifar.sbatch" in out
    assert sorted(p.name for p in project.iterdir()) == ["envkit.yaml"]


def test_dry_run_with_output_writes_the_script_it_prints(capsys, project):
    code, out, _ = run(
        capsys, "launch", "cpu-ddp-cifar", "--on", "slurm", "--nodes", "2", "--dry-run", "--output", "out"
    )
    script = (project / "out" / "cpu-ddp-cifar.sbatch").read_text()
    assert code == 0 and script.rstrip("\n") in out


def test_tpu_pod_runs_only_gcloud_and_stops_on_every_worker(capsys, project, fake_path):
    log = fake_client(fake_path, "gcloud")
    record_push(project, "tpu-vm", "registry.example:5000")
    base = ["tpu-mnist", "--on", "tpu-pod", "--nodes", "4", "--tpu", "my-v4", "--zone", "us-central2-b"]
    assert run(capsys, "launch", *base, "--registry", "registry.example:5000")[0] == 0
    assert run(capsys, "launch", *base, "--stop")[0] == 0
    submitted, stopped = calls(log)
    assert submitted[:6] == ["compute", "tpus", "tpu-vm", "ssh", "my-v4", "--zone"]
    assert "--worker=all" in submitted and f"docker pull registry.example:5000/envkit-tpu-vm@{DIGEST}" in submitted[-1]
    assert f"-e ENVKIT_IMAGE_ID={IMAGE_ID}" in submitted[-1]
    assert "--privileged --net=host" in submitted[-1] and "-e PJRT_DEVICE=TPU" in submitted[-1]
    assert stopped[-2:] == ["--command", "sudo docker stop envkit-tpu-mnist"] and "--worker=all" in stopped


def test_tpu_pod_tarball_is_copied_to_every_worker_then_loaded(capsys, project, fake_path):
    log = fake_client(fake_path, "gcloud")
    tarball = save_manifest(project / "images", "tpu-vm")
    code, _, err = run(
        capsys,
        "launch",
        "tpu-mnist",
        "--on",
        "tpu-pod",
        "--tpu",
        "my-v4",
        "--zone",
        "us-central2-b",
        "--image-tarball",
        str(tarball.relative_to(project)),
    )
    assert code == 0, err
    mkdir, scp, ssh = calls(log)
    assert scp[3] == "scp" and scp[-1] == "--worker=all" and scp[5].endswith(".manifest.json")
    assert "envkit load envkit/envkit-tpu-vm-0123456789ab.tar.gz &&" in ssh[-1]
    # The manifest names the image: its content tag runs, and the results get its ID.
    assert f"-e ENVKIT_IMAGE=envkit-tpu-vm:0123456789ab -e ENVKIT_IMAGE_ID={IMAGE_ID} " in ssh[-1]


def test_hosts_prints_the_commands_and_starts_nothing(capsys, project, fake_path):
    code, out, _ = run(
        capsys, "launch", "cpu-ddp-cifar", "--on", "hosts", "--nodes", "2", "--hosts", "a,b", "--nproc-per-node", "2"
    )
    assert code == 0 and out.count("NNODES=2 RDZV_ENDPOINT=a:29500") == 2 and "--nproc 2" in out
    assert sorted(p.name for p in project.iterdir()) == ["envkit.yaml"]


@pytest.mark.slow  # two gloo processes train for real (~40 s)
def test_slurm_host_script_trains_when_srun_runs_its_task_here(tmp_path):
    """The rendered host-environment script, run by bash with srun/scontrol stand-ins that keep
    the task on this machine: torchrun's flags and the rendezvous are right, one results file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho localhost\n")
    # srun's own options go, but --chdir, where the task runs (the project's root), as srun would.
    (bin_dir / "srun").write_text(
        '#!/bin/bash\nwhile [[ $1 == --* ]]; do [[ $1 == --chdir=* ]] && cd "${1#--chdir=}"; shift; done\nexec "$@"\n'
    )
    for fake in bin_dir.iterdir():
        fake.chmod(0o755)
    job = make_job(
        "cpu-ddp-cifar",
        "slurm",
        nodes=1,
        nproc_per_node=2,
        root=REPO_ROOT,
        data_dir=tmp_path / "data",
        results_dir=tmp_path / "results",
        options=dict(container="host"),
        extra_args=FAKE_DATA,
    )
    script = tmp_path / "job.sbatch"
    script.write_text(slurm.sbatch_script(job))
    env = {
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_NNODES": "1",
        "SLURM_JOB_ID": "7",
    }
    done = subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list((tmp_path / "results").glob("*.json"))) == 1  # rank 0 alone writes it


def test_every_engine_setting_of_the_parser_is_an_engine_option():
    import argparse

    from envkit.cli import launch as cli_launch

    parser = argparse.ArgumentParser()
    cli_launch.register(parser.add_subparsers())
    launch = parser._subparsers._group_actions[0].choices["launch"]
    group = next(g for g in launch._action_groups if g.title == "engine settings")
    settings = {action.dest for action in group._group_actions}
    assert settings == {option.name for engine in engines.REGISTRY.values() for option in engine.options}


TOY_ENGINE = '''"""A toy engine: the command each node would run, in a colour."""

import re

from envkit.errors import EnvkitError
from envkit.launch.plan import LaunchPlan
from envkit.launch.spec import Engine, Option


def check(job):
    if job.options.colour == "red" and job.nodes > 1:
        raise EnvkitError("--colour red runs on one node")


def plan(job, output):
    argv = ("toyrun", "--nodes", str(job.nodes), "--colour", job.options.colour, *job.command())
    return LaunchPlan(files=(), commands=(argv,), results="in the toy's box")


COLOUR = Option("colour", "toy: a colour", default="blue", valid=("lowercase letters", re.compile("^[a-z]+$")))
ENGINE = Engine(name="toy", kinds=("cpu",), options=(COLOUR,), plan=plan, check=check)
'''


def test_a_new_engine_is_one_module_and_one_registry_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "toy_engines").mkdir()
    (tmp_path / "toy_engines" / "__init__.py").write_text("")
    (tmp_path / "toy_engines" / "toy.py").write_text(TOY_ENGINE)
    monkeypatch.syspath_prepend(tmp_path)
    from toy_engines import toy

    monkeypatch.setitem(engines.REGISTRY, "toy", toy.ENGINE)  # the registry line
    config = ["--config", str(REPO_ROOT / "envkit.yaml")]

    def launch(*argv: str) -> tuple[int, str, str]:
        code = main(["launch", "cpu-ddp-cifar", "--on", "toy", "--dry-run", *config, *argv])
        return (code, *capsys.readouterr())

    code, out, _ = launch("--nodes", "2", "--colour", "green")
    assert code == 0 and out.startswith("# --- submit\ntoyrun --nodes 2 --colour green python recipes/cifar.py ")
    assert launch("--colour", "Green")[2] == "envkit: error: --colour 'Green' is not valid: give lowercase letters\n"
    assert launch("--nodes", "2", "--colour", "red")[2] == "envkit: error: --colour red runs on one node\n"
    code, _, err = main(["launch", "gpu-ddp-cifar", "--on", "toy", "--dry-run", *config]), *capsys.readouterr()
    assert (code, err) == (
        2,
        "envkit: error: --on toy runs cpu experiments, and gpu-ddp-cifar is a cuda experiment; "
        "engines for it: hosts, slurm, pytorchjob, jobset, skypilot\n",
    )
    code, _, err = main(["launch", "cpu-ddp-cifar", "--on", "tpu-pod", "--dry-run", *config]), *capsys.readouterr()
    assert code == 2 and err.endswith("engines for it: hosts, slurm, pytorchjob, jobset, skypilot, toy\n")
    help_text = main_help(capsys)
    assert "--colour COLOUR" in help_text and "toy: a colour" in help_text


def main_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["launch", "--help"])
    return capsys.readouterr().out
