"""Locks on the real Docker engine (slow): the base digest from a local registry, and an
image installed from a lock that fails when a hash was edited.

The registry is Debian's docker-registry on a loopback port (test_docker_engine's
fixture); the package indexes are test_lock's, served on 127.0.0.1, which a build on
the host network reaches.
"""

from __future__ import annotations

import io
import tarfile

import pytest
from docker_engine import engine_test
from lock_project import envkit, lock_text, write_project

import docker
from envkit.lock.lockfile import BASE_LINE

INSTALL = "pip install --require-hashes --no-deps --only-binary=:all:"


def tiny_image(client, reference: str) -> None:
    """A one-file image imported from a tarball: enough for a registry to give it a digest."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("etc/os-release")
        data = b'ID=debian\nVERSION_ID="12"\n'
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    repository, tag = reference.rsplit(":", 1)
    client.api.import_image_from_data(buffer.getvalue(), repository=repository, tag=tag)


@engine_test
def test_lock_records_the_base_digest_and_refuses_one_that_is_not_the_tags(client, registry, indexes, tmp_path, capsys):
    reference = f"{registry}/base:bookworm"
    tiny_image(client, reference)
    for line in client.images.push(reference, stream=True, decode=True):
        assert "error" not in line, line
    digest = client.images.get(reference).attrs["RepoDigests"][0].split("@")[1]
    # Only the registry can answer now: the engine no longer holds the image.
    client.images.remove(reference)

    pypi = indexes[0]
    config = write_project(tmp_path, pypi.url, **{"tpu-vm": {"base_image": reference}})
    code, _, err = envkit(capsys, "lock", "--target", "tpu-vm", "--config", str(config))
    assert code == 0, err
    assert f"{BASE_LINE}{reference}@{digest}\n" in lock_text(config, "tpu-vm")
    before = lock_text(config, "tpu-vm")

    wrong = "sha256:" + "0" * 64
    write_project(tmp_path, pypi.url, **{"tpu-vm": {"base_image": f"{reference}@{wrong}"}})
    code, out, err = envkit(capsys, "lock", "--target", "tpu-vm", "--config", str(config))
    assert (code, out) == (2, "")
    assert err == (
        f"envkit: error: target tpu-vm: base_image {reference}@{wrong} names digest {wrong}, but {reference} is "
        f"{digest}; set base_image to {reference}@{digest} or drop the digest\n"
    )
    assert lock_text(config, "tpu-vm") == before

    write_project(tmp_path, pypi.url, **{"tpu-vm": {"base_image": f"{reference}@{digest}"}})
    code, _, err = envkit(capsys, "lock", "--target", "tpu-vm", "--config", str(config))
    assert code == 0 and err == ""
    assert f"{BASE_LINE}{reference}@{digest}\n" in lock_text(config, "tpu-vm")


def build(client, base: str, context: dict[str, bytes], install: str) -> str:
    """Build on the host network (the indexes listen on loopback); returns the build log."""
    dockerfile = (
        f"FROM {base}\n"
        "COPY . /opt/envkit/\n"
        f"RUN python3 -m venv /opt/venv && /opt/venv/bin/{install} -r /opt/envkit/requirements.lock\n"
    )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in {"Dockerfile": dockerfile.encode(), **context}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    log = []
    try:
        image, stream = client.images.build(
            fileobj=buffer, custom_context=True, network_mode="host", rm=True, forcerm=True
        )
        log = [chunk.get("stream", "") for chunk in stream]
        client.images.remove(image.id)
    except docker.errors.BuildError as exc:
        raise AssertionError("".join(chunk.get("stream", "") for chunk in exc.build_log)) from None
    return "".join(log)


@engine_test
def test_an_image_installs_exactly_the_lock_and_an_edited_hash_fails_naming_the_package(
    client, base_image, indexes, tmp_path, capsys
):
    pypi, pytorch = indexes
    config = write_project(tmp_path, pypi.url)
    assert envkit(capsys, "lock", "--target", "cpu", "--config", str(config), "--torch-index-url", pytorch.url)[0] == 0
    lock = lock_text(config, "cpu")
    # One index, never an extra one: torch and torchvision come from their own project pages.
    install = (
        f"{INSTALL} --index-url {pypi.url} --find-links {pytorch.url}torch/ --find-links {pytorch.url}torchvision/"
    )
    log = build(client, base_image, {"requirements.lock": lock.encode()}, install)
    assert "Successfully installed filelock-3.0 pillow-12.0.0 torch-2.9.0+cpu torchvision-0.24.0+cpu tqdm-4.67.1" in log

    # Offline: the wheelhouse alone, no index at all.
    wheels = {
        f"wheels/{wheel.name}": wheel.read_bytes()
        for index in indexes
        for wheel in index.root.glob("*/*.whl")
        if wheel.name.split("-")[0] in ("torch", "torchvision", "filelock", "pillow", "tqdm")
    }
    offline = f"{INSTALL} --no-index --find-links /opt/envkit/wheels"
    log = build(client, base_image, {"requirements.lock": lock.encode(), **wheels}, offline)
    assert "Successfully installed filelock-3.0 pillow-12.0.0 torch-2.9.0+cpu torchvision-0.24.0+cpu tqdm-4.67.1" in log

    torch_hash = lock.split("torch==2.9.0+cpu \\\n    --hash=sha256:")[1][:64]
    edited = lock.replace(torch_hash, "0" * 64)
    with pytest.raises(AssertionError) as failed:
        build(client, base_image, {"requirements.lock": edited.encode()}, install)
    mismatch = [line for line in str(failed.value).splitlines() if "torch==2.9.0+cpu" in line]
    assert mismatch and "Expected sha256 " + "0" * 64 in str(failed.value), str(failed.value)[-3000:]
