"""Hostile recipe arguments and --env values reach the program exactly as the user typed them, and nothing
else runs, on every engine.

Each rendered script or command is executed by bash with fake clients first on
PATH; the fakes record their arguments. YAML outputs are parsed back: one
document, the same keys as a clean render; a Kubernetes container's command and env
are read as the kubelet reads them ($(NAME) expanded, $$ turned into $).
"""

from __future__ import annotations

import shlex
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from launch_jobs import make_job

from envkit.launch import hosts, kubernetes, skypilot, slurm, tpu_pod, yaml_text
from envkit.launch.job import IMAGE_PROJECT
from envkit.launch.shell import line

REGISTRY_IMAGE = "registry.example:5000/team/envkit-cuda:latest"


@pytest.fixture()
def sandbox(tmp_path):
    """Markers the hostile arguments try to create, fake clients, and a project root with a fake run.sh."""
    markers = [tmp_path / name for name in ("dollar", "backtick", "quote", "newline")]
    evil = (
        f"$(touch {markers[0]})",
        f"`touch {markers[1]}`",
        f"'; touch {markers[2]}; '",
        f"x\ntouch {markers[3]}",
        "a\n---\nkind: Secret\nmetadata: {name: stolen}",
        '"$HOME" ${PATH} *',
        # What the kubelet would rewrite unless escaped: $$ becomes $, $(NAME) a variable's value.
        "a$$b",
        "$(ENVKIT_DEVICE)",
        "p@$$word",
        "$(EVIL_00)$",
        "two words",
        'it\'s "quoted"',
        "line1\nline2",
    )
    bin_dir, root, log, env_log = tmp_path / "bin", tmp_path / "root", tmp_path / "calls", tmp_path / "env"
    bin_dir.mkdir()
    record = (
        f'printf "%s\\0" "$(basename "$0")" "$@" >> {shlex.quote(str(log))}; printf "\\n" >> {shlex.quote(str(log))}\n'
    )
    # ... and the --env values it was given, as the program sees them.
    record += f'for v in ${{!EVIL_*}}; do printf "%s\\0" "${{!v}}"; done > {shlex.quote(str(env_log))}\n'
    scripts = {
        "scontrol": 'printf "node1\\nnode2\\n"\n',
        # srun: record, then run the task as srun would (its own options dropped).
        "srun": record + 'while [[ $1 == --* ]]; do shift; done\nexec "$@"\n',
        # python: the run wrapper (python .../envkit_run.py COMMAND...) hands its command the same words.
        "python": 'shift\nexec "$@"\n',
        "torchrun": record,
        "apptainer": record,
        "sudo": record,
        "gcloud": record,
        "podman": record,
    }
    for name, body in scripts.items():
        _executable(bin_dir / name, "#!/bin/bash\n" + body)
    for target in ("cpu", "cuda"):
        (root / "docker" / target).mkdir(parents=True)
        _executable(root / "docker" / target / "run.sh", "#!/bin/bash\n" + record)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_NNODES": "2",
        "SLURM_JOB_ID": "42",
        "SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2",
        "SKYPILOT_NUM_NODES": "2",
        "SKYPILOT_NODE_RANK": "0",
        "SKYPILOT_NUM_GPUS_PER_NODE": "4",
    }
    return {"evil": evil, "markers": markers, "root": root, "log": log, "env_log": env_log, "env": env, "tmp": tmp_path}


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run_bash(sandbox, script: str) -> list[list[str]]:
    done = subprocess.run(
        ["bash", "-c", script], env=sandbox["env"], cwd=sandbox["tmp"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert [m for m in sandbox["markers"] if m.exists()] == [], "a hostile argument ran"
    log = sandbox["log"]
    return [entry.split("\0") for entry in log.read_text().split("\0\n") if entry] if log.exists() else []


def job(sandbox, name, engine, **kwargs):
    """The job with the hostile words as recipe arguments and as --env values (EVIL_00, EVIL_01, ...)."""
    env = tuple(f"EVIL_{index:02d}={value}" for index, value in enumerate(sandbox["evil"]))
    return make_job(
        name,
        engine,
        root=sandbox["root"],
        data_dir=sandbox["tmp"] / "data",
        results_dir=sandbox["tmp"] / "results",
        extra_args=sandbox["evil"],
        env=env,
        **kwargs,
    )


def seen_env(sandbox) -> tuple[str, ...]:
    """The EVIL_* values the last fake program saw in its environment."""
    return tuple(sandbox["env_log"].read_text().split("\0")[:-1])


SLURM_VARIANTS = {
    # podman: srun runs the check on each node (podman runs the image's `true`), then the job.
    "podman": ({}, ["srun", "podman", "srun", "podman"]),
    "host": ({}, ["srun", "torchrun"]),
    "docker": ({}, ["srun", "run.sh"]),
    "pyxis": ({"image": REGISTRY_IMAGE}, ["srun", "torchrun"]),
    "apptainer": ({}, ["srun", "apptainer"]),
}


@pytest.mark.parametrize("container", sorted(SLURM_VARIANTS))
def test_slurm_script_passes_hostile_arguments_as_words(sandbox, container):
    extra, programs = SLURM_VARIANTS[container]
    options = dict(container=container, image_tarball="/images/e.tar.gz" if container == "apptainer" else None)
    script = slurm.sbatch_script(job(sandbox, "gpu-ddp-cifar", "slurm", gpus_per_node=2, options=options, **extra))
    clean = slurm.sbatch_script(make_job("gpu-ddp-cifar", "slurm", gpus_per_node=2, options=options, **extra))
    assert script.count("#SBATCH") == clean.count("#SBATCH")
    recorded = run_bash(sandbox, script)
    assert [argv[0] for argv in recorded] == programs
    if container == "podman":
        check, recorded = recorded[:2], recorded[2:]
        assert check[1] == ["podman", "run", "--rm", "--pull=never", "--network=none", "envkit-cuda:latest", "true"]
    assert seen_env(sandbox) == sandbox["evil"]
    assert all(tuple(argv[-len(sandbox["evil"]) :]) == sandbox["evil"] for argv in recorded)
    if container == "host":
        assert recorded[1][1:12] == [
            "--nnodes",
            "2",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            "node1:29500",
            "--rdzv-id",
            "42",
            "--nproc-per-node",
            "2",
            "recipes/cifar.py",  # from the project's root (srun --chdir)
        ]
        assert f"--chdir={sandbox['root']}" in script


def test_hosts_commands_pass_hostile_arguments_as_words(sandbox):
    plan = hosts.plan(
        job(sandbox, "cpu-ddp-cifar", "hosts", nproc_per_node=2, options=dict(hosts=("node1", "node2"))),
        Path("jobs"),
    )
    recorded = run_bash(sandbox, "\n".join(line(*argv) for _, argv in plan.elsewhere))
    evil = sandbox["evil"]
    assert len(recorded) == 2
    for argv in recorded:
        # run.sh runs the program alone; the --env values are each host's to export, printed nowhere.
        assert argv[:3] == ["run.sh", "python", "recipes/cifar.py"]
        assert tuple(argv[-len(evil) - 2 : -2]) == evil


def test_tpu_pod_commands_pass_hostile_arguments_as_words(sandbox):
    # docker's --env-file holds one line per variable: a --env value with a newline is refused (test_tpu_pod.py)
    one_line = [value for value in sandbox["evil"] if "\n" not in value]
    tpu_job = make_job(
        "tpu-mnist",
        "tpu-pod",
        image="registry.example:5000/envkit-tpu-vm:latest",
        options=dict(tpu="my-v4", zone="us-central2-b"),
        root=sandbox["root"],
        extra_args=sandbox["evil"],
        env=tuple(f"EVIL_{index:02d}={value}" for index, value in enumerate(one_line)),
    )
    plan = tpu_pod.plan(tpu_job, Path("jobs"))
    [(path, text)] = plan.files
    assert text.splitlines()[1:] == [f"EVIL_{index:02d}={value}" for index, value in enumerate(one_line)]
    mkdir, scp, gcloud = run_bash(sandbox, "\n".join(line(*argv) for argv in plan.commands))
    assert scp[scp.index("my-v4:envkit/") - 1] == path and gcloud[-1] == tpu_pod.remote_command(tpu_job)
    # What each worker's shell then runs:
    sandbox["log"].unlink()
    pull, docker_run = run_bash(sandbox, gcloud[-1])
    assert pull[:3] == ["sudo", "docker", "pull"]
    assert docker_run[1:3] == ["docker", "run"] and tuple(docker_run[-len(sandbox["evil"]) :]) == sandbox["evil"]
    assert docker_run[docker_run.index("--env-file") + 1] == f"{sandbox['tmp']}/envkit/tpu-mnist.env"


def test_skypilot_task_is_one_document_and_its_run_quotes_every_word(sandbox):
    sky_job = job(sandbox, "gpu-ddp-cifar", "skypilot", gpus_per_node=4)
    text = yaml_text.dump(skypilot.task(sky_job))
    documents = list(yaml.safe_load_all(text))
    assert len(documents) == 1
    assert documents[0].keys() == skypilot.task(make_job("gpu-ddp-cifar", "skypilot", gpus_per_node=4)).keys()
    assert tuple(documents[0]["envs"][f"EVIL_{index:02d}"] for index in range(len(sandbox["evil"]))) == sandbox["evil"]
    # The run starts in the image's project folder, which this host does not have.
    (torchrun,) = run_bash(sandbox, documents[0]["run"].replace(f"cd {IMAGE_PROJECT}", f"cd {sandbox['tmp']}"))
    assert torchrun[:11] == [
        "torchrun",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "4",
        "--node-rank",
        "0",
        "--master-addr",
        "10.0.0.1",
        "--master-port",
        "29500",
    ]
    assert tuple(torchrun[-len(sandbox["evil"]) :]) == sandbox["evil"]


def _paths(node, prefix=()):
    if isinstance(node, dict):
        return {p for key, value in node.items() for p in _paths(value, (*prefix, key))} | {prefix}
    if isinstance(node, list):
        return {p for item in node for p in _paths(item, (*prefix, "[]"))} | {prefix}
    return {prefix}


@pytest.mark.parametrize("render", [kubernetes.pytorchjob, kubernetes.jobset])
def test_kubernetes_manifest_gains_no_keys_or_documents(sandbox, render):
    engine = "pytorchjob" if render is kubernetes.pytorchjob else "jobset"
    hostile = render(job(sandbox, "gpu-ddp-cifar", engine, gpus_per_node=2))
    documents = list(yaml.safe_load_all(yaml_text.dump(hostile)))
    assert len(documents) == 1 and documents[0] == hostile
    assert _paths(documents[0]) == _paths(render(make_job("gpu-ddp-cifar", engine, gpus_per_node=2)))
    containers = _containers(documents[0])
    assert containers
    for container in containers:
        env, command = kubelet(container)
        assert tuple(command[-len(sandbox["evil"]) :]) == sandbox["evil"]
        assert tuple(env[f"EVIL_{index:02d}"] for index in range(len(sandbox["evil"]))) == sandbox["evil"]


def kubelet_expand(text: str, defined: dict[str, str]) -> str:
    """The kubelet's expansion of a command word or env value (kubernetes third_party/forked/golang/expansion):
    $$ is $, $(NAME) is NAME's value where NAME is defined (else left as written), any other $ stays."""
    out, cursor = [], 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            following = text[cursor + 1]
            closer = text.find(")", cursor + 2) if following == "(" else -1
            if following == "$":
                out.append("$")
                cursor += 2
            elif following == "(" and closer != -1:
                name = text[cursor + 2 : closer]
                out.append(defined.get(name, f"$({name})"))
                cursor = closer + 1
            else:
                out.append("$" + following)
                cursor += 2
        else:
            out.append(text[cursor])
            cursor += 1
    return "".join(out)


def test_the_kubelet_expansion_stand_in_reads_as_kubernetes_documents():
    defined = {"VAR_A": "a", "VAR_B": "b"}
    assert kubelet_expand("$(VAR_A)$(VAR_B)$$(VAR_A)$$$(VAR_B)$(NONE)$", defined) == "ab$(VAR_A)$b$(NONE)$"
    assert kubelet_expand("$(", defined) == "$(" and kubelet_expand("a$b", defined) == "a$b"


def kubelet(container) -> tuple[dict[str, str], list[str]]:
    """The container's environment and argv as its program gets them: each env value expanded with the variables
    before it, the command with all of them."""
    env: dict[str, str] = {}
    for entry in container["env"]:
        if "value" in entry:
            env[entry["name"]] = kubelet_expand(entry["value"], env)
    return env, [kubelet_expand(word, env) for word in container["command"]]


def _containers(manifest):
    if manifest["kind"] == "PyTorchJob":
        specs = [r["template"]["spec"] for r in manifest["spec"]["pytorchReplicaSpecs"].values()]
    else:
        specs = [j["template"]["spec"]["template"]["spec"] for j in manifest["spec"]["replicatedJobs"]]
    return [c for spec in specs for c in spec["containers"]]
