"""Launch by digest: envkit push records what the registry answered, launch runs that digest on every engine
and passes the image's identity in; Slurm's default podman step refuses a node that cannot run the image.

The engine and the registry are stand-ins here (a fake Docker SDK client, fake srun and podman);
tests/integration/test_slurm.py pushes to a real registry and runs the image under podman on a real two-node cluster.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from launch_jobs import DIGEST, IMAGE_ID, REPO_ROOT, make_job, record_push, run

from envkit.cli import main
from envkit.errors import EnvkitError
from envkit.image import build as image_build
from envkit.image import pushed
from envkit.launch import slurm

REGISTRY = "registry.example:5000/team"
OTHER_DIGEST = "sha256:" + "ab" * 32


# ------------------------------------------------------------------ the record


def test_the_record_schema_is_a_valid_schema():
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(json.loads(pushed.SCHEMA_PATH.read_text()))


def test_record_is_deterministic_keyed_by_repository_and_tag_and_a_new_push_replaces_the_tag(tmp_path):
    first = [pushed.Pushed(f"{REGISTRY}/envkit-cpu", tag, DIGEST, IMAGE_ID) for tag in ("0123456789ab", "latest")]
    path = pushed.record(tmp_path / "docker" / "cpu", "cpu", first)
    assert path == tmp_path / "docker" / "cpu" / "pushed.json"
    text = path.read_text()
    assert json.loads(text) == {
        "format": 1,
        "target": "cpu",
        "images": {
            f"{REGISTRY}/envkit-cpu": {
                "0123456789ab": {"digest": DIGEST, "image_id": IMAGE_ID},
                "latest": {"digest": DIGEST, "image_id": IMAGE_ID},
            }
        },
    }
    pushed.record(tmp_path / "docker" / "cpu", "cpu", first)
    assert path.read_text() == text  # same pushes, same bytes

    pushed.record(
        tmp_path / "docker" / "cpu", "cpu", [pushed.Pushed(f"{REGISTRY}/envkit-cpu", "latest", OTHER_DIGEST, IMAGE_ID)]
    )
    assert pushed.lookup(tmp_path / "docker" / "cpu", "cpu", f"{REGISTRY}/envkit-cpu", "latest").digest == OTHER_DIGEST
    assert (
        pushed.lookup(tmp_path / "docker" / "cpu", "cpu", f"{REGISTRY}/envkit-cpu", "0123456789ab").reference
        == f"{REGISTRY}/envkit-cpu@{DIGEST}"
    )
    assert pushed.lookup(tmp_path / "docker" / "cpu", "cpu", "elsewhere:5000/envkit-cpu", "latest") is None


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda doc: doc["images"][f"{REGISTRY}/envkit-cpu"]["latest"].update(digest="sha256:abc"), "does not match"),
        (lambda doc: doc.update(target="cuda"), "records pushes of target 'cuda'"),
        (lambda doc: doc.update(format=2), "format"),
    ],
)
def test_a_damaged_record_is_one_line_naming_the_file(tmp_path, edit, message):
    path = record_push(tmp_path, "cpu", REGISTRY)
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))
    with pytest.raises(EnvkitError, match=message) as raised:
        pushed.lookup(tmp_path / "docker" / "cpu", "cpu", f"{REGISTRY}/envkit-cpu", "latest")
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


class FakeImage:
    id = IMAGE_ID
    tags = ["envkit-cpu:0123456789ab", "envkit-cpu:latest"]
    labels: dict[str, str] = {}
    attrs = {"Os": "linux", "Architecture": "amd64"}

    def tag(self, repository, tag):
        pass


class FakeImages:
    def __init__(self, answers):
        self.answers, self.pushed = answers, []

    def get(self, reference):
        return FakeImage()

    def list(self, name):  # the engine holds the one image: a target of several platforms pushes it alone
        return [FakeImage()]

    def push(self, repository, tag, stream, decode):
        self.pushed.append(f"{repository}:{tag}")
        return iter(self.answers)


def fake_engine(monkeypatch, answers) -> FakeImages:
    images = FakeImages(answers)
    monkeypatch.setattr(image_build, "connect_docker", lambda: type("Client", (), {"images": images})())
    return images


class Target:
    name = "cpu"
    platforms = ("linux/amd64",)


def test_push_returns_the_digest_the_registry_answered_for_each_tag(monkeypatch):
    # What the engine streams for a push (docker push prints the same as "latest: digest: sha256:... size: 528").
    answers = [
        {"status": "Pushed", "progressDetail": {}, "id": "5f70bf18a086"},
        {"status": f"latest: digest: {DIGEST} size: 528"},
        {"progressDetail": {}, "aux": {"Tag": "latest", "Digest": DIGEST, "Size": 528}},
    ]
    images = fake_engine(monkeypatch, answers)
    result = image_build.push(Target(), REGISTRY)
    assert images.pushed == [f"{REGISTRY}/envkit-cpu:0123456789ab", f"{REGISTRY}/envkit-cpu:latest"]
    assert [(p.tag, p.digest, p.image_id) for p in result] == [
        ("0123456789ab", DIGEST, IMAGE_ID),
        ("latest", DIGEST, IMAGE_ID),
    ]


def test_a_push_without_a_digest_is_one_line_and_records_nothing(monkeypatch, capsys, project):
    fake_engine(monkeypatch, [{"status": "Pushed", "progressDetail": {}}])
    code = main(["push", "cpu", "--registry", REGISTRY])
    _, err = capsys.readouterr()
    # progress lines come first; the verdict is the last line
    assert (
        code == 1
        and err.splitlines()[-1].startswith("envkit: error: push of ")
        and "without the registry's digest" in err
    )
    assert not (project / "docker").exists()


def test_cli_push_records_the_digest_and_prints_the_reference_launch_runs(monkeypatch, capsys, project):
    fake_engine(monkeypatch, [{"progressDetail": {}, "aux": {"Tag": "x", "Digest": DIGEST, "Size": 1}}])
    code, out, err = run(capsys, "push", "cpu", "--registry", REGISTRY)
    assert code == 0, err
    assert out.split() == [
        f"{REGISTRY}/envkit-cpu:0123456789ab",
        f"{REGISTRY}/envkit-cpu:latest",
        f"{REGISTRY}/envkit-cpu@{DIGEST}",
    ]
    assert pushed.lookup(project / "docker" / "cpu", "cpu", f"{REGISTRY}/envkit-cpu", "latest").image_id == IMAGE_ID


# ------------------------------------------------------------------ launch


ENGINES = {
    "pytorchjob": ["gpu-ddp-cifar"],
    "jobset": ["gpu-ddp-cifar"],
    "skypilot": ["gpu-ddp-cifar"],
    "tpu-pod": ["tpu-mnist", "--tpu", "t", "--zone", "us-central2-b"],
    "slurm": ["gpu-ddp-cifar"],
    "slurm-pyxis": ["gpu-ddp-cifar", "--container", "pyxis"],
    "slurm-docker": ["gpu-ddp-cifar", "--container", "docker"],
}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_runs_the_recorded_digest_never_the_tag(engine, capsys, project):
    argv = ENGINES[engine]
    target = "tpu-vm" if argv[0] == "tpu-mnist" else "cuda"
    record_push(project, target, REGISTRY)
    code, out, err = run(
        capsys,
        "launch",
        *argv,
        "--on",
        engine.split("-")[0] if engine != "tpu-pod" else engine,
        "--registry",
        REGISTRY,
        "--dry-run",
    )
    assert code == 0, err
    reference = f"{REGISTRY}/envkit-{target}@{DIGEST}"
    assert f"envkit-{target}:latest" not in out
    if engine == "slurm-docker":
        assert f"\nexport IMAGE={reference}\n" in out  # run.sh runs it, and names it and its ID itself
    else:  # the engine runs it, and the recipe is told it with its ID
        assert out.replace("registry.example:5000#team", REGISTRY).count(reference) >= 2 and IMAGE_ID in out


def test_launch_takes_the_tag_asked_for_and_names_a_tag_never_pushed(capsys, project):
    record_push(project, "cpu", REGISTRY, tag="0123456789ab")
    code, out, err = run(
        capsys,
        "launch",
        "cpu-ddp-cifar",
        "--on",
        "jobset",
        "--registry",
        REGISTRY,
        "--tag",
        "0123456789ab",
        "--dry-run",
    )
    assert code == 0 and f"image: {REGISTRY}/envkit-cpu@{DIGEST}" in out
    code, out, err = run(capsys, "launch", "cpu-ddp-cifar", "--on", "jobset", "--registry", REGISTRY, "--dry-run")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err == (
        f"envkit: error: launch by digest: envkit-cpu:latest was never pushed to {REGISTRY} (no entry in "
        f"{project / 'docker' / 'cpu' / 'pushed.json'}); run envkit push cpu --registry {REGISTRY}\n"
    )


def test_a_tarball_names_the_image_from_its_manifest(capsys, project):
    from launch_jobs import save_manifest

    tarball = save_manifest(project / "images", "cpu")
    code, out, err = run(
        capsys, "launch", "cpu-ddp-cifar", "--on", "slurm", "--image-tarball", str(tarball), "--dry-run"
    )
    assert code == 0, err
    assert f"export ENVKIT_IMAGE=envkit-cpu:0123456789ab\nexport ENVKIT_IMAGE_ID={IMAGE_ID}\n" in out
    assert f"' {IMAGE_ID} never {tarball}\n" in out  # each node loads the tarball, then runs the image by its ID


def test_an_explicit_image_runs_as_given(capsys, project):
    code, out, _ = run(
        capsys, "launch", "cpu-ddp-cifar", "--on", "skypilot", "--image", "r.example/x@" + DIGEST, "--dry-run"
    )
    task = yaml.safe_load(out.split("# --- file jobs/cpu-ddp-cifar.sky.yaml\n")[1].split("# --- submit")[0])
    assert (
        code == 0
        and task["resources"]["image_id"] == f"docker:r.example/x@{DIGEST}"
        and "ENVKIT_IMAGE_ID" not in task["envs"]
    )


# ------------------------------------------------------------------ the podman step on each node


def fake_node(tmp_path: Path, podman: str | None) -> dict[str, str]:
    """srun and scontrol that run the task here, and a podman given as a script body (None: no podman at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {"scontrol": "echo node1\n", "srun": 'while [[ $1 == --* ]]; do shift; done\nexec "$@"\n'}
    if podman is not None:
        scripts["podman"] = podman
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    # Only these, coreutils and bash: this machine's real podman must not run.
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("bash", "hostname", "tail", "mkdir", "id", "tr", "echo", "head"):
        (tools / tool).symlink_to(
            subprocess.run(["bash", "-c", f"type -P {tool}"], capture_output=True, text=True).stdout.strip()
        )
    return {
        "PATH": f"{bin_dir}:{tools}",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_NNODES": "1",
        "SLURM_JOB_ID": "7",
        "HOME": str(tmp_path),
    }


@pytest.mark.parametrize(
    "podman, message",
    [
        (None, "podman is not installed: install it, or choose another --container"),
        (
            'echo "Trying to pull registry.example:5000/team/envkit-cpu@sha256:..." >&2\n'
            'echo "Error: runc: runc create failed: error setting rlimit type 7: operation not permitted" >&2\nexit 126\n',
            f"podman cannot run {REGISTRY}/envkit-cpu@{DIGEST}: Error: runc: runc create failed: error setting rlimit type 7: "
            "operation not permitted",
        ),
    ],
)
def test_a_node_whose_podman_cannot_run_the_image_stops_the_job_in_one_line_before_anything_is_written(
    tmp_path, podman, message
):
    job = make_job(
        "cpu-ddp-cifar",
        "slurm",
        nodes=1,
        root=REPO_ROOT,
        image=f"{REGISTRY}/envkit-cpu@{DIGEST}",
        image_id=IMAGE_ID,
        data_dir=tmp_path / "data",
        results_dir=tmp_path / "results",
    )
    script = tmp_path / "job.sbatch"
    script.write_text(slurm.sbatch_script(job))
    done = subprocess.run(
        ["bash", str(script)], env=fake_node(tmp_path, podman), cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"envkit: {subprocess.run(['hostname'], capture_output=True, text=True).stdout.strip()}: {message}"
    ]
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("uid, userns", [(0, ""), (1000, "--userns=keep-id ")], ids=["root", "a user"])
def test_the_check_pulls_a_pushed_image_by_digest_and_the_job_then_runs_it_without_pulling(tmp_path, uid, userns):
    """The same on whatever account runs the suite: the node's caller is root, or a user whose rootless podman maps
    them in with keep-id (an id that answers for them, so the suite passes as root and as a user alike)."""
    log = tmp_path / "podman.calls"
    job = make_job(
        "cpu-ddp-cifar",
        "slurm",
        nodes=1,
        root=REPO_ROOT,
        image=f"{REGISTRY}/envkit-cpu@{DIGEST}",
        image_id=IMAGE_ID,
        data_dir=tmp_path / "data",
        results_dir=tmp_path / "results",
    )
    script = tmp_path / "job.sbatch"
    script.write_text(slurm.sbatch_script(job))
    env = fake_node(tmp_path, f'echo "$*" >> {log}\n')
    fake_id = tmp_path / "bin" / "id"
    fake_id.write_text(f'#!/bin/bash\ncase "$1" in -u|-g) echo {uid} ;; *) exit 1 ;; esac\n')
    fake_id.chmod(0o755)
    done = subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    check, job_run = log.read_text().splitlines()
    assert check == f"run --rm --pull=missing --network=none {REGISTRY}/envkit-cpu@{DIGEST} true"
    assert job_run.startswith(
        f"run --rm --pull=never --network=host --uts=host --shm-size 2g {userns}--user {uid}:{uid} "
    )
    assert (
        " -e ENVKIT_IMAGE -e ENVKIT_IMAGE_ID -e ENVKIT_IMAGE_DIGEST -e ENVKIT_EXPERIMENT -e ENVKIT_TARGET -e ENVKIT_DATA_DIR"
        " -e ENVKIT_RESULTS_DIR -e ENVKIT_DEVICE -e SLURM_NODEID"
        f" -v {tmp_path}/data:/workspace/data "
    ) in job_run
    # One node: torchrun on loopback, with no rendezvous across hosts (the node's own name need not resolve).
    assert (
        f" {REGISTRY}/envkit-cpu@{DIGEST} python /opt/envkit/envkit_run.py torchrun --standalone --local-addr 127.0.0.1 "
        in job_run
    )
