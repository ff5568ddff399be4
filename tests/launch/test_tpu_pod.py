"""The tpu-pod engine: gcloud on every worker, the image by digest or tarball, --stop."""

from __future__ import annotations

from launch_jobs import DIGEST, IMAGE_ID, calls, fake_client, record_push, run, save_manifest


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


def test_a_tpu_pod_env_value_is_on_no_command_line(capsys, project, fake_path):
    """Before: --env WANDB_API_KEY=... became `docker run -e WANDB_API_KEY=...` inside the gcloud ssh command, on the
    command lines of this machine and every worker. Now it is in a launch file (docker run --env-file), copied to
    the workers with the tarball's scp, and named nowhere else; a value with a newline, which --env-file cannot
    hold, is one line."""
    log = fake_client(fake_path, "gcloud")
    record_push(project, "tpu-vm", "registry.example:5000")
    base = ["tpu-mnist", "--on", "tpu-pod", "--tpu", "my-v4", "--zone", "us-central2-b", "--output", "jobs"]
    code, _, err = run(capsys, "launch", *base, "--registry", "registry.example:5000", "--env", "WANDB_API_KEY=v4lue")
    assert code == 0, err
    mkdir, scp, ssh = calls(log)
    assert not [word for call in (mkdir, scp, ssh) for word in call if "v4lue" in word]
    assert scp[3] == "scp" and scp[4:6] == ["jobs/tpu-mnist.env", "my-v4:envkit/"]
    assert '--env-file "$HOME"/envkit/tpu-mnist.env ' in ssh[-1]
    env_file = project / "jobs" / "tpu-mnist.env"
    assert env_file.read_text().splitlines()[1:] == ["WANDB_API_KEY=v4lue"]
    assert env_file.stat().st_mode & 0o777 == 0o600  # a launch file holding --env values is its owner's alone
    code, out, err = run(capsys, "launch", *base, "--registry", "registry.example:5000", "--env", "A=x\ny")
    assert (code, out) == (2, "") and err.count("\n") == 1 and "--env A: --on tpu-pod passes it in docker's" in err


def test_the_env_file_is_removed_from_each_worker_when_the_run_ends(capsys, project, fake_path, tmp_path):
    """Before: ~/envkit/<job>.env, holding the --env values, stayed on every worker after the run. Now the worker's
    command removes it as it exits, whether the run succeeded or not, and keeps the run's exit status. The command
    gcloud was given runs here, on a stand-in worker whose docker reads the file as docker run --env-file would."""
    import subprocess

    log = fake_client(fake_path, "gcloud")
    argv = ["tpu-mnist", "--on", "tpu-pod", "--tpu", "my-v4", "--zone", "us-central2-b", "--image", "envkit-tpu-vm:x"]
    assert run(capsys, "launch", *argv, "--output", "jobs", "--env", "GLOO_SOCKET_IFNAME=eth0")[0] == 0
    command = calls(log)[-1][-1]
    worker, tools = tmp_path / "worker", tmp_path / "tools"
    tools.mkdir()
    (tools / "sudo").write_text('#!/bin/bash\nexec "$@"\n')
    # docker run reads its --env-file: the file is there while the container runs
    (tools / "docker").write_text(
        '#!/bin/bash\n[ "$1" = run ] || exit 0\ngrep -q GLOO_SOCKET_IFNAME=eth0 "$HOME/envkit/tpu-mnist.env" || exit 9\n'
        'exit "$RUN_EXIT"\n'
    )
    for tool in ("sudo", "docker"):
        (tools / tool).chmod(0o755)
    for status in (0, 3):
        (worker / "envkit").mkdir(parents=True, exist_ok=True)
        (worker / "envkit" / "tpu-mnist.env").write_text((project / "jobs" / "tpu-mnist.env").read_text())
        env = {"HOME": str(worker), "PATH": f"{tools}:/usr/bin:/bin", "RUN_EXIT": str(status)}
        ran = subprocess.run(["bash", "-c", command], env=env, check=False)
        assert ran.returncode == status
        assert not (worker / "envkit" / "tpu-mnist.env").exists()
