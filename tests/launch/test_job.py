"""`envkit launch` for every engine: the rendering (golden files), bad input, submission through fake clients.

Each engine's own behaviour is tested in its file (test_slurm, test_hosts, test_tpu_pod, test_kubernetes,
test_skypilot, test_kaggle); the registry and the toy engine in test_engines."""

from __future__ import annotations

import os
import subprocess
import sys

import paths
import pytest
from launch_jobs import CASES, OUTPUT, calls, fake_client, run
from paths import REPO_ROOT, TESTS

from envkit.launch import engines
from envkit.launch.plan import describe

GOLDEN = paths.GOLDEN / "launch"


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
    # Before: a file holding a --env value was as readable as any; now it is its owner's alone.
    argv = [*argv, "--on", engine, "--nodes", "2", "--output", "out", "--env", "WANDB_API_KEY=v4lue"]
    assert run(capsys, "launch", *argv)[0] == 0 and "v4lue" in written.read_text()
    assert written.stat().st_mode & 0o777 == 0o600


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


@pytest.mark.parametrize(
    "engine, argv, file",
    [
        ("slurm", ["gpu-ddp-cifar", "--gpus-per-node", "2"], "gpu-ddp-cifar.sbatch"),
        ("pytorchjob", ["gpu-ddp-cifar"], "gpu-ddp-cifar.pytorchjob.yaml"),
        ("skypilot", ["gpu-ddp-cifar"], "gpu-ddp-cifar.sky.yaml"),
    ],
)
def test_a_job_file_of_the_users_is_never_overwritten(engine, argv, file, capsys, project, fake_path):
    """Before: the user's own out/gpu-ddp-cifar.sbatch (or manifest, or task) was overwritten by the job envkit
    wrote there, with --dry-run --output and on a submission alike; a file envkit launch wrote is written again."""
    log = fake_client(fake_path, {"slurm": "sbatch", "pytorchjob": "kubectl", "skypilot": "sky"}[engine])
    mine = project / "out" / file
    mine.parent.mkdir()
    mine.write_text("#!/bin/bash\n# my own job, tuned by hand\n")
    for dry_run in (["--dry-run"], []):
        code, out, err = run(capsys, "launch", *argv, "--on", engine, "--nodes", "2", "--output", "out", *dry_run)
        assert (code, out) == (2, ""), err
        assert err == (
            f"envkit: error: out/{file} is not a file envkit launch wrote (it lacks the mark '# Rendered by envkit "
            "launch:'): envkit never overwrites it; move it away, or write the job elsewhere with --output DIR\n"
        )
        assert mine.read_text() == "#!/bin/bash\n# my own job, tuned by hand\n" and calls(log) == []
    mine.unlink()
    for _ in range(2):  # written, then written again over envkit's own
        assert run(capsys, "launch", *argv, "--on", engine, "--nodes", "2", "--output", "out")[0] == 0


def test_a_job_is_never_written_outside_the_project_through_a_link(capsys, project, tmp_path_factory):
    """Issue 39 §18: jobs/ a link to a folder elsewhere took the job's files there."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (project / "jobs").symlink_to(elsewhere)
    code, out, err = run(
        capsys, "launch", "cpu-ddp-cifar", "--on", "slurm", "--nodes", "2", "--dry-run", "--output", "jobs"
    )
    assert (code, out) == (2, "") and err.startswith("envkit: error: jobs/cpu-ddp-cifar.sbatch is in ")
    assert f"a symbolic link takes it to {elsewhere}/cpu-ddp-cifar.sbatch, outside it" in err
    assert list(elsewhere.iterdir()) == []


def test_a_failed_write_removes_only_the_files_the_plan_added(tmp_path):
    """Before: when a later file could not be written, an earlier job's file the plan had just written over was
    deleted with the new ones."""
    from envkit.errors import EnvkitError
    from envkit.launch.plan import LaunchPlan, write_files

    mark = "# Rendered by envkit launch: "
    earlier, new, blocked = tmp_path / "a.sbatch", tmp_path / "b.yaml", tmp_path / "file" / "c.yaml"
    earlier.write_text(f"#!/bin/bash\n{mark}an earlier job\n")
    (tmp_path / "file").write_text("not a folder\n")
    texts = [f"{mark}again\n", f"{mark}new\n", f"{mark}blocked\n"]
    plan = LaunchPlan(files=tuple(zip(map(str, (earlier, new, blocked)), texts, strict=True)), commands=(), results="")
    with pytest.raises(EnvkitError, match="cannot write"):
        write_files(plan)
    assert earlier.read_text() == f"{mark}again\n" and not new.exists()


@pytest.mark.parametrize(
    ("engine", "shown"),
    [
        ("hosts", "ENVKIT_ENV=OMP_NUM_THREADS NNODES=2 RDZV_ENDPOINT=a:29500 RDZV_ID=cpu-ddp-cifar OMP_NUM_THREADS=1 "),
        ("slurm", "OMP_NUM_THREADS=1"),
        ("skypilot", "OMP_NUM_THREADS: '1'"),
    ],
)
def test_a_targets_env_reaches_the_launched_program(capsys, project, engine, shown):
    # issue 40 §7: cpu: {env: {OMP_NUM_THREADS: "1"}} is one thread under every engine, as on the host and in run.sh
    config = project / "envkit.yaml"
    config.write_text(
        config.read_text().replace(
            "  cpu:\n    kind: cpu\n", '  cpu:\n    kind: cpu\n    env: {OMP_NUM_THREADS: "1"}\n', 1
        )
    )
    argv = ["--hosts", "a,b"] if engine == "hosts" else []
    code, out, err = run(capsys, "launch", "cpu-ddp-cifar", "--on", engine, "--nodes", "2", *argv, "--dry-run")
    assert code == 0 and shown in out, err + out


@pytest.mark.parametrize(
    ("engine", "asked"), [("slurm", "#SBATCH --gpus-per-node=8\n"), ("pytorchjob", "nvidia.com/gpu: 8\n")]
)
def test_gpus_all_without_a_count_stops_the_launch_in_one_line(engine, asked, tmp_path, capsys, monkeypatch):
    """Issue 40 §17: before, init's ddp (gpus: all, no devices) was planned with --gpus-per-node=1 on Slurm: one
    GPU where the experiment says every GPU of the node."""
    import shutil

    from envkit.cli import main

    project = tmp_path / "project"
    shutil.copytree(TESTS / "example_project", project)
    assert main(["init", "--dir", str(project)]) == 0
    monkeypatch.chdir(project)
    capsys.readouterr()
    argv = ["launch", "ddp", "--on", engine, "--target", "cuda", "--dry-run"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"envkit: error: ddp: gpus: all is every GPU of a node, and --on {engine} asks for GPUs by number: give "
        "--gpus-per-node N (make: GPUS_PER_NODE=N), or devices: N in its envkit.yaml entry\n"
    )
    assert main([*argv, "--gpus-per-node", "8"]) == 0
    assert asked in capsys.readouterr().out


# Put together, so that this file holds no token a scanner would flag.
HF_TOKEN = "hf" + "_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
SECRETS = ("--env", f"HF_TOKEN={HF_TOKEN}", "--env", "DB_PASSWORD=s3cr3t-pw", "--env", "GLOO_SOCKET_IFNAME=eth0")


@pytest.mark.parametrize(
    "engine, argv, client, file",
    [
        ("slurm", ["gpu-ddp-cifar", "--gpus-per-node", "2"], "sbatch", "gpu-ddp-cifar.sbatch"),
        ("skypilot", ["gpu-ddp-cifar"], "sky", "gpu-ddp-cifar.sky.yaml"),
    ],
)
def test_an_env_secret_is_in_no_launch_file_and_reaches_the_client_by_name(
    engine, argv, client, file, capsys, project, fake_path
):
    """Before: `--env HF_TOKEN=hf_...` was written into the sbatch script's `export` and the SkyPilot task's envs
    (and printed by --dry-run). Now a value envkit's secret check flags (by its form, or its name: DB_PASSWORD) is
    in no file and no printed line: the client gets it in its environment (sbatch exports it to the job, sky launch
    --env NAME reads it), and run.sh or podman pass it into the container by name. Other values are written. (--on
    hosts prints no --env value: test_job_command.py.)"""
    argv = [*argv, "--on", engine, "--nodes", "2", "--output", "out", *SECRETS]
    code, out, err = run(capsys, "launch", *argv, "--dry-run")
    assert code == 0, err
    assert HF_TOKEN not in out + err and "s3cr3t-pw" not in out + err
    assert "GLOO_SOCKET_IFNAME=eth0" in out or "GLOO_SOCKET_IFNAME: eth0" in out
    assert "# HF_TOKEN DB_PASSWORD: --env secrets, in no file" in out
    seen = fake_path / "seen"
    (fake_path / client).write_text(f'#!/bin/bash\nprintf "%s\\n" "$*" "$HF_TOKEN" "$DB_PASSWORD" > {seen}\n')
    (fake_path / client).chmod(0o755)
    code, _, err = run(capsys, "launch", *argv)
    assert code == 0, err
    written = (project / "out" / file).read_text()
    assert HF_TOKEN not in written and "s3cr3t-pw" not in written
    arguments, *values = seen.read_text().splitlines()
    assert values == [HF_TOKEN, "s3cr3t-pw"] and HF_TOKEN not in arguments
    if engine == "skypilot":
        assert "--env HF_TOKEN --env DB_PASSWORD" in arguments
    else:
        assert ': "${HF_TOKEN:?set it where sbatch runs' in written


@pytest.mark.parametrize(
    "engine, argv",
    [
        ("pytorchjob", ["gpu-ddp-cifar"]),
        ("jobset", ["cpu-ddp-cifar"]),
        ("tpu-pod", ["tpu-mnist", "--tpu", "my-v4", "--zone", "us-central2-b", "--image", "x:1"]),
    ],
)
def test_an_env_secret_an_engine_could_only_write_is_one_line(engine, argv, capsys, project):
    """Before: the Kubernetes manifest's env and tpu-pod's env file (copied to every worker) held the value."""
    code, out, err = run(capsys, "launch", *argv, "--on", engine, "--output", "out", "--dry-run", *SECRETS)
    assert (code, out) == (2, "") and err.count("\n") == 1 and HF_TOKEN not in err, err
    assert "--env HF_TOKEN holds a Hugging Face token, and this engine passes a value only written into" in err
    assert "--on skypilot and --on slurm pass it by name" in err
    assert sorted(p.name for p in project.iterdir()) == ["envkit.yaml"]
