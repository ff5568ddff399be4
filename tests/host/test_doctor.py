"""Host facts and "which make targets work here", with the host's pieces faked."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from docker_engine import engine_test, envkit
from paths import REPO_ROOT

from envkit.errors import EnvkitError
from envkit.host import doctor
from envkit.project.experiments import load_experiments
from envkit.project.kinds import kind
from envkit.support import docker_client as engine

NO_ENGINE = "no Docker engine answers at unix:///x: start one with ..."


def facts(**overrides) -> doctor.HostFacts:
    defaults = dict(docker_version="20.10.24", free_disk_gb=50.0, cpu_count=8)
    return doctor.HostFacts(**{**defaults, **overrides})


GPU_HOST = facts(gpus=["GPU 0: A100", "GPU 1: A100"], nvidia_runtime=True)
TPU_HOST = facts(devices={"tpu": ["/dev/accel0", "/dev/accel1"]})


@pytest.mark.parametrize(
    "host, runnable",
    [
        (facts(), ["cpu-mnist", "cpu-single-cifar", "cpu-ddp-cifar"]),
        (
            GPU_HOST,
            [
                "cpu-mnist",
                "cpu-single-cifar",
                "cpu-ddp-cifar",
                "gpu-mnist",
                "gpu-single-cifar",
                "gpu-dp-cifar",
                "gpu-ddp-cifar",
            ],
        ),
        (
            TPU_HOST,
            ["cpu-mnist", "cpu-single-cifar", "cpu-ddp-cifar", "tpu-mnist", "tpu-mnist-single", "e3-batch-scaling"],
        ),
        (facts(docker_version=None, docker_error=NO_ENGINE, gpus=["GPU 0: A100"], nvidia_runtime=True), []),
        (facts(gpus=["GPU 0: A100"], nvidia_runtime=False), ["cpu-mnist", "cpu-single-cifar", "cpu-ddp-cifar"]),
    ],
)
def test_runnable_experiments_follow_the_host(host, runnable):
    assert doctor.runnable_experiments(host) == runnable


def test_doctor_reports_every_experiment_make_target(repo_root, tmp_path):
    """Doctor's own report (the CLI, no engine) has a row for each experiment, and each row names a make target."""
    done = run_doctor(tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = done.stdout.split("make targets on this host:\n")[1].splitlines()
    named = [row.split()[1] for row in rows]
    assert sorted(named) == sorted(load_experiments())
    makefile = (repo_root / "Makefile").read_text()
    assert all(f"\n{name}:" in makefile for name in named)


def test_doctor_without_an_engine_says_so_once_and_gives_each_row_its_own_reason():
    """Before: the 170-character engine line was repeated on all 9 rows, hiding the GPU and TPU rows' reasons."""
    text = doctor.format_report(facts(docker_version=None, docker_error=NO_ENGINE))
    assert text.count(NO_ENGINE) == 1 and text.splitlines()[0] == f"docker engine   none: {NO_ENGINE}"
    rows = {row.split()[1]: row for row in text.split("make targets on this host:\n")[1].splitlines()}
    assert rows["cpu-mnist"].endswith("cpu-mnist         needs the Docker engine (see 'docker engine' above)")
    assert rows["gpu-dp-cifar"].endswith(kind("cuda").host.missing)
    assert rows["tpu-mnist"].endswith(kind("tpu-vm").host.missing)
    assert all(row.startswith("  no  ") and len(row) < 140 for row in rows.values())


@pytest.mark.parametrize(
    "host, kind, reason",
    [
        (facts(), "cuda", "no NVIDIA GPU found"),
        (facts(gpus=["GPU 0: T4"]), "cuda", "install nvidia-container-toolkit"),
        (facts(), "tpu-vm", "Cloud TPU VM"),
        (facts(docker_version=None, docker_error=NO_ENGINE), "cpu", "no Docker engine answers"),
    ],
)
def test_require_names_the_reason_in_one_line(host, kind, reason):
    with pytest.raises(EnvkitError, match=reason) as caught:
        doctor.require(host, kind)
    assert str(caught.value).startswith(f"this host cannot run {kind} images: ")
    assert "\n" not in str(caught.value)


def test_require_unknown_kind_lists_the_kinds():
    with pytest.raises(EnvkitError, match="choose from cpu, cuda, tpu-vm"):
        doctor.require(facts(), "gpu")


@pytest.mark.parametrize("text, expected", [("all", None), ("0", [0]), ("1,2,3,4", [1, 2, 3, 4])])
def test_parse_gpus_accepts_indices_or_all(text, expected):
    assert doctor.parse_gpus(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "is invalid"),
        ("0,", "is invalid"),
        ("a", "is invalid"),
        ("-1", "is invalid"),
        ("0 1", "is invalid"),
        ("1,1", "names a GPU twice"),
    ],
)
def test_parse_gpus_refuses_malformed_values(text, message):
    with pytest.raises(EnvkitError, match=message):
        doctor.parse_gpus(text)


def test_parse_gpus_reads_the_syntax_from_kinds_yaml(monkeypatch):
    monkeypatch.setattr(doctor.kinds, "gpu_indices", lambda: "[0-3]")
    assert doctor.parse_gpus("2") == [2]
    with pytest.raises(EnvkitError, match="is invalid"):
        doctor.parse_gpus("0,1")


def test_gpus_beyond_the_host_are_refused_after_the_host_check():
    with pytest.raises(EnvkitError, match="names GPU 2, but this host has 2"):
        doctor.require(GPU_HOST, "cuda", "0,2")
    doctor.require(GPU_HOST, "cuda", "1,0")
    # malformed GPUS is bad input even where no GPU exists
    with pytest.raises(EnvkitError, match="GPUS='x' is invalid"):
        doctor.require(facts(), "cuda", "x")


def test_report_lists_every_target_with_its_verdict():
    text = doctor.format_report(facts(free_disk_gb=3.0))
    for name in load_experiments():
        assert name in text
    assert "yes cpu-mnist" in text and "no  gpu-dp-cifar" in text
    assert "low:" in text


@pytest.fixture
def fake_host(tmp_path, monkeypatch):
    """A PATH with a fake nvidia-smi and an engine that reports the nvidia runtime."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\necho 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1)'\necho 'GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-2)'\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    class Engine:
        def version(self):
            return {"Version": "24.0.7"}

        def info(self):
            return {"Runtimes": {"runc": {}, "nvidia": {}}, "DockerRootDir": str(tmp_path)}

    monkeypatch.setattr(doctor, "connect_docker", Engine)
    return tmp_path


def test_inspect_host_gathers_engine_gpus_and_disk(fake_host, monkeypatch):
    monkeypatch.setattr(doctor, "device_files", lambda check: [])
    host = doctor.inspect_host()
    assert host.docker_version == "24.0.7" and host.docker_error is None
    assert host.nvidia_runtime is True
    assert host.gpus == ["GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1)", "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-2)"]
    assert host.free_disk_gb > 0 and host.cpu_count >= 1
    assert "gpu-ddp-cifar" in doctor.runnable_experiments(host)


@pytest.mark.parametrize(
    "version, engine_could",
    [
        ({"Version": "20.10.24+dfsg1"}, False),  # Debian 12's docker.io: BuildKit 0.8
        ({"Version": "25.0.5"}, False),
        ({"Version": "26.1.5+dfsg1"}, True),  # Debian 13's docker.io
        ({"Version": "20.10.24", "Components": [{"Name": "BuildKit", "Version": "v0.13.2"}]}, True),
        ({"Version": "27.0.1", "Components": [{"Name": "buildkit", "Version": "v0.12.5"}]}, False),
    ],
)
def test_the_docker_builder_gives_no_identical_digests_and_says_why(fake_host, monkeypatch, version, engine_could):
    monkeypatch.setattr(doctor, "device_files", lambda check: [])
    monkeypatch.setattr(doctor.connect_docker, "version", lambda self: version)
    docker = doctor.inspect_host().builders[0]
    assert (docker.name, docker.version, docker.identical_digests) == ("docker", version["Version"], False)
    assert doctor.engine_can_give_identical_digests(version) is engine_could
    assert ("envkit's docker builds do not ask it to" in docker.note) is engine_could
    assert docker.buildkit == next((c["Version"][1:] for c in version.get("Components", [])), None)


def fake_buildah(directory: Path, help_text: str) -> Path:
    buildah = directory / "buildah"
    buildah.write_text(f"""#!/bin/sh
[ "$1" = --version ] && echo 'buildah version 1.28.2 (image-spec 1.1.0-rc2)'
[ "$1" = bud ] && echo '{help_text}'
exit 0
""")
    buildah.chmod(0o755)
    return buildah


@pytest.mark.parametrize(
    "help_text, identical", [("  --timestamp int   set created timestamp", True), ("  --layers", False)]
)
def test_doctor_lists_buildah_and_whether_it_gives_identical_digests(fake_host, monkeypatch, help_text, identical):
    monkeypatch.setattr(doctor, "device_files", lambda check: [])
    monkeypatch.setenv("BUILDAH", str(fake_buildah(fake_host, help_text)))
    host = doctor.inspect_host()
    assert [b.name for b in host.builders] == ["docker", "buildah"]
    buildah = host.builders[1]
    assert (buildah.version, buildah.identical_digests) == ("1.28.2", identical)
    report = doctor.format_report(host).splitlines()
    first = report.index(
        next(line for line in report if line.startswith("builders        docker 24.0.7: identical digests no: "))
    )
    assert report[first + 1].startswith(
        f"                buildah 1.28.2: identical digests {'yes' if identical else 'no'}: "
    )
    assert doctor.as_json(host)["builders"][1] == {
        "name": "buildah",
        "version": "1.28.2",
        "identical_digests": identical,
        "note": buildah.note,
        "buildkit": None,
    }


def test_inspect_host_without_engine_records_the_reason(monkeypatch, tmp_path):
    def no_engine():
        raise EnvkitError(NO_ENGINE)

    monkeypatch.setattr(doctor, "connect_docker", no_engine)
    monkeypatch.setenv("BUILDAH", str(tmp_path / "no-buildah"))
    host = doctor.inspect_host()
    assert host.docker_version is None and host.docker_error == NO_ENGINE
    assert [(b.name, b.version, b.identical_digests) for b in host.builders] == [
        ("docker", None, False),
        ("buildah", None, False),
    ]
    assert (
        "builders        docker: no engine answers\n                buildah: not installed (apt-get install buildah)"
        in doctor.format_report(host)
    )
    assert doctor.runnable_experiments(host) == []


def test_tpu_devices_skip_the_vfio_control_node(monkeypatch):
    listing = {"/dev/accel*": ["/dev/accel1", "/dev/accel0"], "/dev/vfio/*": ["/dev/vfio/vfio", "/dev/vfio/0"]}
    monkeypatch.setattr(doctor.glob, "glob", lambda pattern: listing[pattern])
    assert doctor.device_files(kind("tpu-vm").host) == ["/dev/accel0", "/dev/accel1", "/dev/vfio/0"]


@pytest.fixture
def resolver(monkeypatch):
    """socket's name lookups answered from a dict (name -> fqdn); names not in ``known`` fail as DNS does."""
    known: dict[str, str] = {}

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in known.values() and host not in known:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", 0))]

    monkeypatch.setattr(doctor.socket, "gethostname", lambda: "node7")
    monkeypatch.setattr(doctor.socket, "getfqdn", lambda name="": known.get(name, name))
    monkeypatch.setattr(doctor.socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/no.sock")  # no engine: the same answer on every machine
    return known


def test_a_host_name_that_resolves_is_reported_as_such(resolver):
    resolver["node7"] = "node7.cluster.example"
    host = doctor.inspect_host()
    assert (host.hostname, host.hostname_resolves, host.hostname_problem) == ("node7", True, None)
    assert "host name       node7  (resolves)" in doctor.format_report(host)
    assert doctor.as_json(host)["hostname_resolves"] is True


def test_a_host_name_that_does_not_resolve_says_what_to_do(resolver):
    host = doctor.inspect_host()
    assert (host.hostname, host.hostname_resolves) == ("node7", False)
    assert host.hostname_problem.startswith("does not resolve: Name or service not known; multi-host torchrun's c10d")
    assert "add 'ADDRESS node7' to /etc/hosts" in host.hostname_problem
    line = next(text for text in doctor.format_report(host).splitlines() if text.startswith("host name"))
    assert line.startswith("host name       node7  (does not resolve: ") and "/etc/hosts" in line
    record = doctor.as_json(host)
    assert (record["hostname"], record["hostname_resolves"], record["hostname_problem"]) == (
        "node7",
        False,
        host.hostname_problem,
    )


def test_a_full_name_that_does_not_resolve_is_named(resolver, monkeypatch):
    resolver["node7"] = "node7.cluster.example"
    monkeypatch.setattr(doctor.socket, "getfqdn", lambda name="": "node7.elsewhere.example")
    problem = doctor.inspect_host().hostname_problem
    assert problem.startswith("resolves, its full name node7.elsewhere.example does not: ")


def doctor_json_as(command: list[str], tmp_path: Path) -> dict:
    """``envkit doctor --json`` run under ``command`` (a host of another name), no engine to ask."""
    env = {
        **os.environ,
        "DOCKER_HOST": f"unix://{tmp_path}/no.sock",
        "PYTHONPATH": str(REPO_ROOT),
    }
    done = subprocess.run(
        [*command, sys.executable, "-m", "envkit", "doctor", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow  # needs root: a host of its own name in namespaces (about 2 s)
def test_host_names_for_real_in_namespace_hosts(tmp_path):
    from multihost import NAMESPACE_TOOLS, namespace_hosts, require

    require(NAMESPACE_TOOLS)
    # An empty network namespace (no DNS to ask) under a name no hosts file knows: c10d would fail here.
    nowhere = doctor_json_as(
        ["unshare", "--uts", "--net", "sh", "-c", 'hostname envkit-nowhere && exec "$@"', "sh"], tmp_path
    )
    assert (nowhere["hostname"], nowhere["hostname_resolves"]) == ("envkit-nowhere", False)
    assert "add 'ADDRESS envkit-nowhere' to /etc/hosts" in nowhere["hostname_problem"]
    # A host from netns-hosts.sh: its /etc/hosts names it.
    with namespace_hosts(tmp_path / "hosts", count=1) as hosts:
        node = doctor_json_as(hosts.command("node1"), tmp_path)
    assert (node["hostname"], node["hostname_resolves"], node["hostname_problem"]) == ("node1", True, None)


def run_doctor(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    # An engine address that cannot answer makes the outcome the same on every machine.
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no.sock"}
    return subprocess.run([sys.executable, "-m", "envkit", "doctor", *args], capture_output=True, text=True, env=env)


def test_cli_doctor_require_fails_before_anything_is_built(tmp_path):
    done = run_doctor("--require", "cpu", tmp_path=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("envkit: error: this host cannot run cpu images: no Docker engine answers")
    assert done.stderr.count("\n") == 1


def test_cli_doctor_json_reports_the_facts(tmp_path):
    done = run_doctor("--json", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["runnable"] == [] and "no Docker engine" in report["docker_error"]
    assert set(report) >= {"docker_version", "nvidia_runtime", "gpus", "tpu_devices", "free_disk_gb", "cpu_count"}


def test_cli_doctor_refuses_bad_gpus(tmp_path):
    done = run_doctor("--gpus", "0,,1", tmp_path=tmp_path)
    assert done.returncode == 2 and "GPUS='0,,1' is invalid" in done.stderr


@pytest.mark.parametrize(
    "failure, message",
    [
        (
            "Error while fetching server API version: ('Connection aborted.', PermissionError(13, 'Permission denied'))",
            "permission denied on the Docker socket: add yourself to the 'docker' group",
        ),
        (
            "Error while fetching server API version: ('Connection aborted.', FileNotFoundError(2, 'No such file or directory'))",
            "no Docker engine answers at unix:///var/run/docker.sock: start one with 'sudo systemctl start docker'",
        ),
    ],
)
def test_engine_failures_become_one_actionable_line(monkeypatch, failure, message):
    import docker

    def refuse(**_):
        raise docker.errors.DockerException(failure)

    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(docker, "from_env", refuse)
    with pytest.raises(EnvkitError) as caught:
        engine.connect_docker()
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


@engine_test
def test_doctor_sees_the_engine(client, project):
    report = json.loads(envkit("doctor", "--json", cwd=project).stdout)
    assert report["docker_version"] and report["docker_error"] is None
    assert "cpu-mnist" in report["runnable"]


def test_doctor_says_what_it_checked_and_what_it_could_not():
    """Issue 40 §18: before, every row said yes on a host where no base image could be pulled and nothing said
    that doctor had not looked: a yes is the engine and the device, never "it will run"."""
    text = doctor.format_report(facts())
    head, rows = text.split("make targets on this host:\n")
    assert "checked: the container engine answers; each target kind's devices" in head
    assert "not checked: that the base images and the package index can be reached: the first envkit build" in head
    assert "not checked: that a script runs on its target's device (a script that needs CUDA fails on cpu): " in head
    assert all(row.startswith(("  yes ", "  no  ")) for row in rows.splitlines())
    record = doctor.as_json(facts())
    assert record["checked"] == list(doctor.CHECKED) and record["not_checked"] == list(doctor.NOT_CHECKED)
