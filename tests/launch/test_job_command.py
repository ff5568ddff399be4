"""A project's own command experiment on every launch engine: a `scale: torchrun` experiment starts under
torchrun with the node's device count, and the experiment's `env:` (then --env) reaches the program.

Each engine's output is read as its runner reads it: the sbatch script's exports and srun line, podman's -e
flags, run.sh's command in the image (run.sh passes none of the caller's variables but its own), a Kubernetes
container's command and env as the kubelet expands them, the SkyPilot task's envs and run script.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from launch_jobs import make_job

from envkit.errors import EnvkitError
from envkit.launch import hosts, kubernetes, skypilot, slurm, yaml_text
from envkit.project.experiments import Experiment, RecipeRun

# The experiment's own variables, with what a shell or the kubelet would rewrite.
EXPERIMENT_ENV = {"OMP_NUM_THREADS": "4", "GREETING": "a b $HOME $(ENVKIT_DEVICE) $$"}
SCRIPT_ARGS = ("--epochs", "2")


def ddp(kind: str) -> Experiment:
    return Experiment(
        name=f"{kind}-ddp-train",
        summary="the user's DDP script",
        title="train.py under torchrun",
        kind=kind,
        recipe=None,
        args=SCRIPT_ARGS,
        gpus="all" if kind == "cuda" else "none",
        scale="torchrun",
        published=None,
        runs=(RecipeRun(label=None, name=None, summary="the user's DDP script", args=SCRIPT_ARGS),),
        command=("python", "train.py"),
        env=dict(EXPERIMENT_ENV),
    )


# (kind, the job's node size, the processes torchrun starts on each node)
SIZES = {"cuda": ({"gpus_per_node": 4}, "4"), "cpu": ({"nproc_per_node": 3}, "3")}


def job(kind: str, engine: str, image: str | None = None, **options):
    size, _ = SIZES[kind]
    return make_job(ddp(kind), engine, env=("EXTRA=--env's",), image=image, options=options, **size)


def expected_env() -> dict[str, str]:
    return {**EXPERIMENT_ENV, "EXTRA": "--env's"}


def after_wrapper(words: list[str]) -> list[str]:
    """The program's argv: what follows the run wrapper (python .../envkit_run.py)."""
    index = next(i for i, word in enumerate(words) if word.endswith("envkit_run.py"))
    assert words[index - 1] == "python"
    return words[index + 1 :]


def env_command(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """env(1)'s assignments and the program it starts (no env(1): none)."""
    if not words or words[0] != "env":
        return {}, words
    assignments = [word for word in words[1:] if "=" in word and not word.startswith("-")]
    count = next(i for i, word in enumerate(words[1:]) if word not in assignments)
    return dict(word.partition("=")[::2] for word in words[1 : 1 + count]), words[1 + count :]


def assert_torchrun(program: list[str], nproc: str | None) -> None:
    """torchrun with ``nproc`` processes per node (None: the operator's PET_NPROC_PER_NODE), then the script and its
    arguments exactly."""
    assert program[0] == "torchrun", program
    if nproc is not None:
        assert program[program.index("--nproc-per-node") + 1] == nproc
    assert program[-3:] == ["train.py", *SCRIPT_ARGS]


def exports(script: str) -> dict[str, str]:
    pairs = [shlex.split(row)[1] for row in script.splitlines() if row.startswith("export ") and "=" in row]
    return dict(pair.partition("=")[::2] for pair in pairs if not pair.startswith("$"))


def slurm_view(job_) -> tuple[dict[str, str], list[str]]:
    """The program's environment and argv in the job's container, as srun, podman, pyxis or apptainer give them."""
    script = slurm.sbatch_script(job_)
    exported = exports(script)
    words = shlex.split(script.rstrip("\n").splitlines()[-1])
    container = job_.options.container
    if container == "docker":  # run.sh passes the variables ENVKIT_ENV names, as the script exports them
        program = words[words.index(f"{job_.root}/docker/{job_.target}/run.sh") + 1 :]
        return {name: exported[name] for name in exported["ENVKIT_ENV"].split()}, program
    if container == "podman":
        flags = words[words.index("run") : words.index(job_.image)]
        given = [flags[i + 1] for i, flag in enumerate(flags) if flag == "-e"]
        env = {name: exported[name] for name in given if "=" not in name and name in exported}
        env.update(dict(pair.partition("=")[::2] for pair in given if "=" in pair))
        return env, after_wrapper(words)
    return exported, after_wrapper(words)  # host, pyxis and apptainer hand the task's environment on


@pytest.mark.parametrize("kind", sorted(SIZES))
@pytest.mark.parametrize("container", slurm.CONTAINERS)
def test_slurm(kind, container):
    options = {"container": container, "image_tarball": "/images/e.tar.gz" if container == "apptainer" else None}
    image = "registry.example/envkit-e:1" if container == "pyxis" else None  # pyxis pulls from a registry
    job_ = job(kind, "slurm", image=image, **options)
    env, program = slurm_view(job_)
    assert expected_env().items() <= env.items()
    assert_torchrun(program, SIZES[kind][1])


@pytest.mark.parametrize("kind", sorted(SIZES))
def test_hosts(kind):
    """Before: run.sh ran `env NAME=VALUE... program` in the image, so every --env value was in the run's argv, which
    its record (run.argv), the report and the page show. Now run.sh passes the job's variables by name (ENVKIT_ENV)
    from the host's environment: the experiment's env: is set in the printed command, a --env value nowhere (each
    host exports it, as the plan says)."""
    job_ = job(kind, "hosts", hosts=("node1", "node2"))
    plan = hosts.plan(job_, Path("jobs"))
    (_, argv), _ = plan.elsewhere
    run_sh = list(argv).index(f"{job_.root}/docker/{job_.target}/run.sh")
    assert argv[0] == "env"
    assigned = dict(word.partition("=")[::2] for word in argv[1:run_sh])
    assert assigned["ENVKIT_ENV"].split() == list(expected_env())
    assert {name: assigned[name] for name in EXPERIMENT_ENV} == EXPERIMENT_ENV and "EXTRA" not in assigned
    assert not [word for word in argv if "--env's" in word]
    assert "export EXTRA on each host first: envkit prints no --env value" in plan.notes
    assert_torchrun(list(argv[run_sh + 1 :]), SIZES[kind][1])


def kubelet(container) -> tuple[dict[str, str], list[str]]:
    def expand(text: str, defined: dict[str, str]) -> str:
        # $$ is $, $(NAME) a defined variable's value (tests/launch/test_shell.py has the whole rule under test)
        out, cursor = [], 0
        while cursor < len(text):
            pair = text[cursor : cursor + 2]
            closer = text.find(")", cursor)
            if pair == "$$":
                out, cursor = [*out, "$"], cursor + 2
            elif pair == "$(" and closer != -1 and text[cursor + 2 : closer] in defined:
                out, cursor = [*out, defined[text[cursor + 2 : closer]]], closer + 1
            else:
                out, cursor = [*out, text[cursor]], cursor + 1
        return "".join(out)

    env: dict[str, str] = {}
    for entry in container["env"]:
        if "value" in entry:
            env[entry["name"]] = expand(entry["value"], env)
    return env, [expand(word, env) for word in container["command"]]


@pytest.mark.parametrize("kind", sorted(SIZES))
@pytest.mark.parametrize("engine", ["pytorchjob", "jobset"])
def test_kubernetes(kind, engine):
    job_ = job(kind, engine)
    manifest = yaml.safe_load(
        yaml_text.dump(kubernetes.pytorchjob(job_) if engine == "pytorchjob" else kubernetes.jobset(job_))
    )
    if engine == "pytorchjob":
        specs = [replica["template"]["spec"] for replica in manifest["spec"]["pytorchReplicaSpecs"].values()]
        nproc = manifest["spec"]["nprocPerNode"]
    else:
        specs = [manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]]
    assert specs
    for spec in specs:
        env, command = kubelet(spec["containers"][0])
        assert expected_env().items() <= env.items()
        assert_torchrun(after_wrapper(command), None)  # torchrun reads PET_NPROC_PER_NODE
        assert (nproc if engine == "pytorchjob" else env["PET_NPROC_PER_NODE"]) == SIZES[kind][1]


@pytest.mark.parametrize("kind", sorted(SIZES))
def test_skypilot(kind):
    task = yaml.safe_load(yaml_text.dump(skypilot.task(job(kind, "skypilot"))))
    assert expected_env().items() <= task["envs"].items()
    program = after_wrapper(shlex.split(task["run"].rstrip("\n").splitlines()[-1]))
    # On GPUs SkyPilot says how many each node has: the accelerators the task asks for.
    nproc = "$SKYPILOT_NUM_GPUS_PER_NODE" if kind == "cuda" else SIZES[kind][1]
    assert_torchrun(program, nproc)
    assert kind == "cpu" or task["resources"]["accelerators"] == "A100:4"


def test_tpu_pod_refuses_a_torchrun_experiment_in_one_line():
    with pytest.raises(EnvkitError) as refused:
        make_job(ddp("tpu-vm"), "tpu-pod", options={"tpu": "my-v4", "zone": "us-central2-b"})
    assert str(refused.value) == (
        "--on tpu-pod starts tpu-vm-ddp-train's program once on every worker, and it is a scale torchrun "
        "experiment (torchrun on each host, a c10d rendezvous): run it with --on jobset or --on skypilot"
    )


def test_torchrun_starts_one_process_per_gpu_the_target_names_else_per_device_the_experiment_needs():
    from types import SimpleNamespace

    from envkit.launch.engines import build_job

    experiment = ddp("cuda")._replace(devices=8)
    at = dict(nodes=1, root=Path("/p"), data_dir=Path("/d"), results_dir=Path("/r"), image="envkit-cuda:latest")
    for target, processes in (
        (SimpleNamespace(name="cuda", gpus="0,2"), 2),
        (SimpleNamespace(name="cuda", gpus="all"), 8),
    ):
        job_ = build_job("jobset", experiment, target, **at)
        assert (job_.gpus_per_node, job_.processes_per_node) == (processes, processes)
    first = experiment._replace(gpus="first", scale="single")
    assert build_job("jobset", first, SimpleNamespace(name="cuda", gpus="0,2"), **at).gpus_per_node == 1


def test_the_experiments_env_comes_first_and_env_overrides_it():
    job_ = make_job(ddp("cpu"), "jobset", nproc_per_node=3, env=("OMP_NUM_THREADS=1",))
    assert job_.env == (("OMP_NUM_THREADS", "1"), ("GREETING", EXPERIMENT_ENV["GREETING"]))
