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
