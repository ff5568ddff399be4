"""A TorchTPU tpu-vm image built by a real Docker engine: its pins hold together, and with no TPU the
MNIST recipe says so in one line.

torch-tpu 0.2.0 has no CPU mode (docs/torchtpu.md), so the image's recipe can only reach its no-TPU
path here. The container runs with no network: libtpu would otherwise look for the cloud metadata
server. torch is the local 2.13.0 CPU build (inside TorchTPU's range); torch-tpu, libtpu and their
dependencies are downloaded into the wheelhouse by pip on the host, as the cpu image's test does.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest
import yaml
from docker_engine import (
    engine_test,
    envkit,
    fill_wheelhouse,
    locked_build,
)
from lock_project import seed_recipe_experiment
from xla_env import NO_TPU_LINE

from envkit.image.build_context import staging_path

# Its own target name, so the image never shares a tag with the project's torch_xla tpu-vm image.
TARGET = "torchtpu"
CONFIG = f"""\
targets:
  {TARGET}:
    kind: tpu-vm
    backend: torch_tpu
    torch: "2.13.0"
    torchvision: false
    python: "3.11"
"""


@pytest.fixture
def project(tmp_path, repo_root):
    shutil.copytree(repo_root / "templates", tmp_path / "templates")
    shutil.copytree(repo_root / "recipes", tmp_path / "recipes", ignore=shutil.ignore_patterns("__pycache__"))
    # The image runs the MNIST recipe: the project says so, so that its lock holds the recipe's tqdm.
    (tmp_path / "envkit.yaml").write_text(yaml.safe_dump({"experiments": seed_recipe_experiment("tpu-vm")}) + CONFIG)
    envkit("render", "--all", "--config", "envkit.yaml", cwd=tmp_path)
    yield tmp_path
    shutil.rmtree(staging_path(tmp_path, TARGET), ignore_errors=True)


@engine_test
def test_torch_tpu_image_builds_and_its_recipe_says_in_one_line_that_there_is_no_tpu(
    client, base_image, docker_cli, project, tmp_path_factory
):
    wheels = fill_wheelhouse(tmp_path_factory.mktemp("torchtpu-wheels"), project / "envkit.yaml", TARGET)
    try:
        built = locked_build(project, wheels, base_image, target=TARGET).stdout.strip()
    finally:
        shutil.rmtree(wheels)
    image = client.images.get(built)
    try:
        assert image.labels["io.envkit.pin.torch_tpu"] == "0.2.0" and image.labels["io.envkit.pin.torch"] == "2.13.0"
        docker = [*shlex.split(docker_cli), "run", "--rm", "--network", "none", image.id]
        check = subprocess.run([*docker, "pip", "check"], capture_output=True, text=True, timeout=300)
        assert check.returncode == 0 and "No broken requirements found" in check.stdout, check.stdout + check.stderr
        done = subprocess.run(
            [
                *docker,
                "python",
                "recipes/mnist.py",
                "--device",
                "tpu",
                "--dataset",
                "fake",
                "--results-dir",
                "/tmp/results",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert (done.returncode, done.stderr, done.stdout) == (2, NO_TPU_LINE, "")
    finally:
        client.images.remove(image.id, force=True)
