"""Notebook platforms as data, and notebook targets in envkit.yaml: loaded, listed, locked for the runtime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator
from wheel_index import IndexServer

from envkit.cli import main
from envkit.lock.inputs import lock_inputs
from envkit.lock.lockfile import lock_path, read_lock
from envkit.project import kinds
from envkit.project.load import load_config
from envkit.project.notebook_platforms import PLATFORMS_PATH, SCHEMA_PATH, load_platforms

KAGGLE_IDS = {
    "TpuV38",
    "TpuV5E8",
    "TpuV6E8",
    "NvidiaTeslaT4",
    "NvidiaTeslaP100",
    "NvidiaL4",
    "NvidiaTeslaA100",
    "NvidiaH100",
    "NvidiaRtxPro6000",
}


def envkit(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---- the platforms' data -------------------------------------------------------------


def test_schema_is_valid_and_the_data_follows_it():
    schema = json.loads(SCHEMA_PATH.read_text())
    Draft202012Validator.check_schema(schema)
    assert list(Draft202012Validator(schema).iter_errors(yaml.safe_load(PLATFORMS_PATH.read_text()))) == []


def test_accelerators_under_each_platforms_own_names():
    platforms = load_platforms().platforms
    assert set(platforms["colab"].accelerators) == {"v5e-1", "T4", "L4", "A100", "H100", "G4"}
    assert set(platforms["kaggle"].accelerators) == KAGGLE_IDS
    assert platforms["colab"].accelerators["v5e-1"].device == {"tpu": "v5e", "chips": 1}
    assert platforms["kaggle"].accelerators["TpuV5E8"].device == {"tpu": "v5e", "chips": 8}
    # what an experiment runs on: TPU cores (v3 has 2 a chip) or GPUs
    devices = {name: accelerator.devices for name, accelerator in platforms["kaggle"].accelerators.items()}
    assert devices["TpuV38"] == devices["TpuV5E8"] == 8 and devices["NvidiaTeslaT4"] == 1
    assert platforms["colab"].accelerators["v5e-1"].devices == 1
    # every accelerator names a target kind envkit has, and a runtime of its platform
    for platform in platforms.values():
        for accelerator in platform.accelerators.values():
            assert accelerator.kind in kinds.names()
            assert accelerator.runtime in platform.runtimes
            assert ("tpu" in accelerator.device) == (accelerator.kind == "tpu-vm")


def test_every_runtime_fact_has_a_source_and_a_date():
    platforms = load_platforms().platforms
    assert platforms, "no notebook platform"
    for platform in platforms.values():
        assert platform.runtimes, platform
        for runtime in platform.runtimes.values():
            assert {"os", "python", "glibc"} <= set(runtime.facts)
            for fact in runtime.facts.values():
                assert fact.source and fact.date[:2] == "20"
                assert fact.cite().endswith(", unverified") == (not fact.verified)


def test_the_runtimes_as_last_seen():
    platforms = load_platforms().platforms
    colab_tpu = platforms["colab"].runtimes["tpu"].packages()
    assert colab_tpu == {"torch": "2.9.0+cpu", "torch_xla": "2.9.0", "libtpu": "0.0.21.1"}
    assert platforms["colab"].runtimes["gpu"].packages() == {"torch": "2.11.0+cu128"}
    kaggle_tpu = platforms["kaggle"].runtimes["tpu"]
    assert (kaggle_tpu.python, kaggle_tpu.packages()) == (
        "3.12",
        {"torch": "2.8.0+cpu", "torch_xla": "2.8.0", "libtpu": "0.0.17"},
    )


def test_cpu_mode_drops_accelerator_options_with_their_values():
    data = load_platforms()
    args = data.cpu_mode_args(("--device", "tpu", "--cores", "all", "--per-device-batch", "16"))
    assert args[:2] == ["--per-device-batch", "16"] and args[2:4] == ["--device", "cpu"]
    assert "--cores" not in args and "tpu" not in args


# ---- notebook targets --------------------------------------------------------------


def test_the_repo_declares_notebook_targets_on_their_runtimes(repo_root):
    config = load_config(repo_root / "envkit.yaml")
    colab, t4, kaggle = (config.targets[name] for name in ("colab-tpu", "colab-t4", "kaggle-tpu"))
    assert (colab.kind, colab.platform, colab.accelerator, colab.base_image) == ("tpu-vm", "colab", "v5e-1", None)
    # The project's one Python, which uv provides in the notebook (Colab's runtimes have 3.13, whose
    # cp313 libtpu 0.0.21 lacks anyway; Kaggle's TPU runtime has 3.12).
    assert {t.python for t in (colab, t4, kaggle)} == {"3.11"} and colab.notebooks == ("tpu-mnist-single",)
    # A notebook's torch is the default index's build: torch 2.9.0's CUDA 12.8.
    assert (t4.kind, t4.torch_variant, t4.cuda) == ("cuda", None, "12.8")
    assert kaggle.accelerator == "TpuV5E8" and kaggle.notebooks == ("tpu-mnist", "e3-batch-scaling")
    assert set(config.images) == {"cpu", "cuda", "tpu-vm"}


def test_locks_are_made_for_the_runtimes_platform(repo_root):
    config = load_config(repo_root / "envkit.yaml")
    assert lock_inputs(config.targets["colab-tpu"]).platform == "x86_64-manylinux_2_35"  # Ubuntu 22.04
    # Debian 13's glibc 2.41 is newer than any manylinux tag uv knows: 2_40 is the closest safe one.
    assert lock_inputs(config.targets["kaggle-tpu"]).platform == "x86_64-manylinux_2_40"
    for name in ("colab-tpu", "colab-t4", "kaggle-tpu"):
        path = lock_path(config, name)
        assert path == repo_root / "notebooks" / name / "requirements.lock"
        lock = read_lock(path)
        assert lock.inputs_sha256 == lock_inputs(config.targets[name]).digest() and not lock.unhashed
        assert "torch" in lock.packages
    assert "libtpu" in read_lock(lock_path(config, "colab-tpu")).packages


def test_targets_lists_where_a_notebook_target_runs(capsys, repo_root):
    code, out, _ = envkit(capsys, "targets", "--config", str(repo_root / "envkit.yaml"))
    row = next(line for line in out.splitlines() if line.startswith("colab-tpu "))
    assert code == 0 and "colab v5e-1 (tpu runtime: Python 3.13.15, glibc 2.35)" in row and " locked " in row


NOTEBOOK_TARGET = {
    "platform": "colab",
    "accelerator": "v5e-1",
    "backend": "torch_xla",
    "torch": "2.9.0",
    "torch_xla": "2.9.0",
    "python": "3.12",
}


# Experiments the notebook targets may list: three of kind tpu-vm (one needing 8 cores), one cuda.
EXPERIMENTS = {
    name: {"summary": name, "kind": kind, "recipe": "mnist"}
    for name, kind in (("tpu-mnist", "tpu-vm"), ("tpu-mnist-single", "tpu-vm"), ("gpu-mnist", "cuda"))
}
EXPERIMENTS["e3-batch-scaling"] = {
    "summary": "E3",
    "kind": "tpu-vm",
    "recipe": "mnist",
    "published": "E3, 8-core TPU",
    "devices": 8,
}


def write_config(root: Path, **target) -> Path:
    path = root / "envkit.yaml"
    path.write_text(yaml.safe_dump({"targets": {"nb": target}, "experiments": EXPERIMENTS}, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"platform": "colob"}, "'colob' is not valid; allowed: "),
        (
            {"accelerator": "v2-8"},
            "unknown accelerator 'v2-8' for Google Colab; its accelerators: v5e-1, T4, L4, A100, H100, G4",
        ),
        ({"platform": "kaggle"}, "unknown accelerator 'v5e-1' for Kaggle; its accelerators: TpuV38, TpuV5E8,"),
        ({"base_image": "python:3.12"}, "'base_image' does not apply to a notebook target: it runs in colab's runtime"),
        ({"accelerator": None}, "a notebook target needs 'accelerator'"),
        ({"kind": "cuda"}, "colab's v5e-1 is a tpu-vm accelerator, not cuda"),
        (
            {"notebooks": ["gpu-mnist"]},
            "'gpu-mnist' is not an experiment that runs on nb (tpu-vm); choose from tpu-mnist, tpu-mnist-single, e3-batch-scaling",
        ),
        (
            {"notebooks": ["tpu-mnist-single", "e3-batch-scaling"]},
            "notebooks[1]: experiment e3-batch-scaling needs 8 TPU cores (E3, 8-core TPU), and target nb's colab "
            "v5e-1 has 1; accelerators with enough: kaggle TpuV38 (8), kaggle TpuV5E8 (8), kaggle TpuV6E8 (8)",
        ),
    ],
)
def test_bad_notebook_targets_are_one_line_exit_2(tmp_path, capsys, change, message):
    target = {key: value for key, value in {**NOTEBOOK_TARGET, **change}.items() if value is not None}
    config = write_config(tmp_path, **target)
    code, out, err = envkit(capsys, "lock", "--all", "--config", str(config))
    assert (code, out) == (2, "") and err.startswith("envkit: error: ") and err.count("\n") == 1
    assert message in err, err
    if change.get("platform") == "colob":
        assert err.rstrip().endswith("one of colab, kaggle")  # the valid platforms
    assert list(tmp_path.iterdir()) == [config]


def test_accelerator_without_platform_is_refused(tmp_path, capsys):
    config = write_config(tmp_path, kind="tpu-vm", torch="2.9.0", accelerator="v5e-1")
    code, _, err = envkit(capsys, "targets", "--config", str(config))
    assert code == 2 and "'accelerator' applies to notebook targets only: add platform (colab, kaggle)" in err


@pytest.fixture()
def tpu_index(tmp_path, monkeypatch):
    """A local index whose libtpu has wheels for CPython 3.12 only, as libtpu 0.0.21's cp310-cp312."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    with IndexServer(tmp_path / "www") as server:
        pypi = server.index("pypi")
        pypi.add("torch", "2.9.0", "filelock>=3")
        pypi.add("filelock", "3.0")
        pypi.add("torchvision", "0.24.0", "torch==2.9.0")
        pypi.add("torch_xla", "2.9.0", 'libtpu==0.0.21; extra == "tpu"')
        pypi.add("libtpu", "0.0.21", tag="cp312-cp312-manylinux_2_31_x86_64")
        pypi.add("tqdm", "4.67.1")
        yield pypi


def test_a_lock_for_the_runtimes_python(tmp_path, capsys, tpu_index):
    config = write_config(tmp_path, **NOTEBOOK_TARGET, pip_index_url=tpu_index.url)
    code, out, err = envkit(capsys, "lock", "--target", "nb", "--config", str(config))
    assert (code, err) == (0, ""), err
    assert out == "wrote notebooks/nb/requirements.lock (6 packages)\n"
    text = (tmp_path / "notebooks" / "nb" / "requirements.lock").read_text()
    assert "# platform: x86_64-manylinux_2_35, python 3.12\n" in text
    assert "# base-image: none: runs in colab's tpu runtime (Ubuntu 22.04.5 LTS, glibc 2.35)\n" in text


def test_a_lock_that_cannot_resolve_for_the_platforms_python_is_one_line(tmp_path, capsys, tpu_index, monkeypatch):
    # The runtime's own Python (3.13): libtpu has no wheel for it. A narrow terminal's COLUMNS (uv wraps its
    # messages at it) must not cut the line before the tag.
    monkeypatch.setenv("COLUMNS", "60")
    target = {key: value for key, value in NOTEBOOK_TARGET.items() if key != "python"}
    config = write_config(tmp_path, **target, pip_index_url=tpu_index.url)
    code, out, err = envkit(capsys, "lock", "--target", "nb", "--config", str(config))
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith("envkit: error: target nb: uv cannot resolve its requirements: ")
    assert "cp313" in err and "libtpu" in err
    assert not (tmp_path / "notebooks").exists()


def test_without_python_a_notebook_target_takes_its_runtimes(tmp_path):
    target = {key: value for key, value in NOTEBOOK_TARGET.items() if key != "python"}
    config = load_config(write_config(tmp_path, **{**target, "platform": "kaggle", "accelerator": "TpuV5E8"}))
    assert config.targets["nb"].python == "3.12"  # Kaggle's TPU runtime


def test_a_config_without_notebook_targets_loads_without_the_platforms_records(tmp_path):
    """Issue 42: every config load imported this module and built its five frozen dataclasses (about 4 ms of a
    `envkit experiment --python` that runs no notebook); a notebook target still loads them."""
    import subprocess
    import sys

    (tmp_path / "envkit.yaml").write_text("targets:\n  cpu: {kind: cpu, torch: '2.9.0'}\n")
    probe = (
        "import sys; from pathlib import Path; from envkit.project.load import load_config; "
        "load_config(Path(sys.argv[1])); print('envkit.project.notebook_platforms' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "envkit.yaml")], capture_output=True, text=True, check=True
    )
    assert done.stdout == "False\n"
