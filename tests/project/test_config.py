"""envkit.yaml validation: defaults, the shipped schema, and one line per bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import paths
import pytest
from jsonschema import Draft202012Validator

from envkit.errors import EnvkitError
from envkit.project.document import SCHEMA_PATH
from envkit.project.load import load_config


def write_config(directory: Path, text: str) -> Path:
    path = directory / "envkit.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def config_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(EnvkitError) as caught:
        load_config(write_config(tmp_path, text))
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == 2
    return message


def test_shipped_schema_is_valid_json_schema():
    Draft202012Validator.check_schema(json.loads(SCHEMA_PATH.read_text()))


def test_repo_config_declares_the_three_like_for_like_targets(repo_root):
    config = load_config(repo_root / "envkit.yaml")
    assert config.root == repo_root
    cpu, cuda, tpu = (config.targets[name] for name in ("cpu", "cuda", "tpu-vm"))
    # One Python on every target, which a Debian 12 base made here provides: every committed
    # Dockerfile can be built and run on such a stand-in (a notebook target's venv gets it from uv).
    assert {target.python for target in config.targets.values()} == {"3.11"}
    assert {target.base_image for target in config.images.values()} == {"python:3.11-slim-bookworm"}
    assert cpu.pins() == {"python": "3.11", "torch": "2.9.0", "torchvision": "0.24.0"}
    assert (cpu.kind, cpu.torch_variant) == ("cpu", "cpu")
    # CUDA 12.8 is the default index's own build of torch 2.9.0: no local tag, no second index.
    assert (cuda.cuda, cuda.torch_variant) == ("12.8", None)
    assert "python3" not in cuda.apt_packages, "the python image brings its Python"
    assert tpu.torch == tpu.torch_xla == "2.9.0"
    assert (tpu.backend, tpu.torch_tpu, tpu.libtpu, tpu.torch_variant) == ("torch_xla", None, "0.0.21", None)
    assert "tqdm==4.67.1" in cpu.pip_packages


def test_cpu_target_can_leave_torchvision_out_for_newer_torch(tmp_path):
    config = load_config(write_config(tmp_path, 'targets:\n  cpu: {kind: cpu, torch: "2.13.0", torchvision: false}\n'))
    target = config.targets["cpu"]
    assert target.torchvision is None
    assert target.pins() == {"python": "3.11", "torch": "2.13.0"}


def test_torchvision_patch_follows_torch(tmp_path):
    config = load_config(write_config(tmp_path, 'targets:\n  cpu: {kind: cpu, torch: "2.7.1"}\n'))
    assert config.targets["cpu"].torchvision == "0.22.1"


def test_overrides_are_kept_in_order(tmp_path):
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "proxy.crt").write_text("pem")
    config = load_config(
        write_config(
            tmp_path,
            """
targets:
  gpu:
    kind: cuda
    torch: "2.7.0"
    cuda: "11.8"
    base_image: registry.example.com/cuda:11.8
    apt_packages: [git, libgl1]
    pip_packages: [tqdm==4.66.0, numpy>=1.26]
    env: {OMP_NUM_THREADS: 4, NAME: "a b"}
    ca_certificates: [certs/proxy.crt]
    pip_index_url: https://mirror.example.com/simple
    find_links: [/opt/wheels]
    shm_size: 4g
    gpus: [0, 2]
""",
        )
    )
    gpu = config.targets["gpu"]
    assert (gpu.torch_variant, gpu.python, gpu.base_image) == ("cu118", "3.10", "registry.example.com/cuda:11.8")
    assert gpu.apt_packages == ("python3", "python3-venv", "git", "libgl1")
    assert gpu.pip_packages == ("tqdm==4.66.0", "numpy>=1.26"), "a user tqdm pin replaces the default"
    assert gpu.env == {"NAME": "a b", "OMP_NUM_THREADS": "4"}
    assert gpu.ca_certificates == ((tmp_path / "certs" / "proxy.crt").resolve(),)
    assert (gpu.gpus, gpu.shm_size, gpu.pip_index_url) == ("0,2", "4g", "https://mirror.example.com/simple")


def test_config_hash_is_stable_across_locations_and_sensitive_to_content(tmp_path):
    text = 'targets:\n  cpu: {kind: cpu, torch: "2.9.0"}\n'
    first, second = tmp_path / "a", tmp_path / "b" / "deeper"
    second.mkdir(parents=True)
    first.mkdir()
    hash_a = load_config(write_config(first, text)).targets["cpu"].config_hash
    hash_b = load_config(write_config(second, text)).targets["cpu"].config_hash
    changed = load_config(write_config(first, text.replace("}", ", apt_packages: [git]}"))).targets["cpu"].config_hash
    assert hash_a == hash_b != changed
    assert len(hash_a) == 64


# --- bad input: one line, exit code 2, the field and the valid choices -----------------


def test_malformed_yaml_names_file_and_line(tmp_path):
    message = config_error(tmp_path, 'targets:\n  cpu:\n    kind: cpu\n    torch: "2.9.0\n')
    assert message.startswith(f"{tmp_path / 'envkit.yaml'}:")
    assert "malformed YAML" in message
    assert message.split(":")[1].isdigit()


def test_missing_config_file(tmp_path):
    with pytest.raises(EnvkitError, match="not found; create it or pass --config FILE"):
        load_config(tmp_path / "absent.yaml")


def test_unknown_key_suggests_the_closest(tmp_path):
    message = config_error(tmp_path, 'targets:\n  cpu:\n    kind: cpu\n    torch: "2.9.0"\n    pyhton: "3.11"\n')
    assert "envkit.yaml:5: targets.cpu.pyhton: unknown key 'pyhton'; did you mean 'python'?" in message
    assert "allowed: accelerator, apt_packages," in message


def test_unknown_top_level_key(tmp_path):
    message = config_error(tmp_path, 'target:\n  cpu: {kind: cpu, torch: "2.9.0"}\n')
    assert message.endswith(
        "envkit.yaml:1: target: unknown key 'target'; did you mean 'targets'? allowed: experiments, files_limit_mb, include_secrets, output, requirements, source, targets"
    )


def test_missing_required_key(tmp_path):
    message = config_error(tmp_path, "source: https://example.com/x\n")
    assert message.endswith("envkit.yaml:1: 'targets' is a required property")


# Was test_torch_xla_must_equal_torch: that rule is wrong (torch_xla 2.8.1 goes with torch 2.8.0).
def test_an_invalid_torch_xla_pair_lists_the_valid_pairs(tmp_path):
    message = config_error(tmp_path, 'targets:\n  tpu-vm: {kind: tpu-vm, torch: "2.9.0", torch_xla: "2.8.0"}\n')
    assert message.endswith(
        "targets.tpu-vm.torch_xla: torch 2.9.0 with torch_xla 2.8.0 is not a released torch_xla pair; "
        "valid pairs: torch 2.8.0 + torch_xla 2.8.0, torch 2.8.0 + torch_xla 2.8.1"
    )


def test_a_torch_without_its_own_torch_xla_is_refused(tmp_path):
    message = config_error(tmp_path, 'targets:\n  tpu-vm: {kind: tpu-vm, torch: "2.9.1"}\n')
    assert message.endswith(
        "targets.tpu-vm.torch: torch 2.9.1 is not a released torch_xla pair; valid pairs: torch 2.9.0 + torch_xla 2.9.0"
    )


@pytest.mark.parametrize(("torch_xla", "expected"), [(None, "2.8.1"), ("2.8.0", "2.8.0"), ("2.8.1", "2.8.1")])
def test_torch_xla_bugfix_release_pairs_with_the_older_torch(tmp_path, torch_xla, expected):
    extra = f', torch_xla: "{torch_xla}"' if torch_xla else ""
    target = load_config(
        write_config(tmp_path, f'targets:\n  t: {{kind: tpu-vm, torch: "2.8.0", python: "3.12"{extra}}}\n')
    ).targets["t"]
    assert (target.backend, target.torch, target.torch_xla, target.libtpu) == ("torch_xla", "2.8.0", expected, "0.0.17")


def test_python_outside_the_release_range(tmp_path):
    message = config_error(tmp_path, 'targets:\n  tpu-vm: {kind: tpu-vm, torch: "2.9.0", python: "3.9"}\n')
    assert "targets.tpu-vm.python: Python 3.9 is outside torch_xla 2.9.0's supported range 3.10-3.13" in message


def test_torch_tpu_target(tmp_path):
    text = 'targets:\n  tpu: {kind: tpu-vm, torch: "2.13.0", backend: torch_tpu, torchvision: false}\n'
    target = load_config(write_config(tmp_path, text)).targets["tpu"]
    assert (target.backend, target.torch_tpu, target.libtpu, target.torch_xla) == ("torch_tpu", "0.2.0", "0.0.50", None)
    # torch_tpu brings the device: torch is PyTorch's CPU build.
    assert target.torch_variant == "cpu"
    assert target.pins() == {"libtpu": "0.0.50", "python": "3.11", "torch": "2.13.0", "torch_tpu": "0.2.0"}


@pytest.mark.parametrize(("torch", "backend"), [("2.9.0", "torch_xla"), ("2.14.1", "torch_tpu")])
def test_tpu_backend_defaults_by_torch(tmp_path, torch, backend):
    target = load_config(write_config(tmp_path, f'targets:\n  t: {{kind: tpu-vm, torch: "{torch}"}}\n')).targets["t"]
    assert target.backend == backend


def test_newer_libtpu_is_allowed_for_torch_tpu_but_not_older(tmp_path):
    text = 'targets:\n  t: {kind: tpu-vm, torch: "2.13.0", libtpu: "0.0.52"}\n'
    assert load_config(write_config(tmp_path, text)).targets["t"].libtpu == "0.0.52"
    message = config_error(tmp_path, 'targets:\n  t: {kind: tpu-vm, torch: "2.13.0", libtpu: "0.0.49"}\n')
    assert message.endswith(
        "targets.t.libtpu: libtpu 0.0.49 is older than torch_tpu 0.2.0 accepts; valid choices: 0.0.50 or newer"
    )


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            'torch: "2.9.0", backend: torch_tpu',
            "targets.t.backend: torch 2.9.0 is outside every torch_tpu release's torch range (torch_tpu 0.2.0: torch 2.11.0-2.15.0)",
        ),
        (
            'torch: "2.13.0", backend: torch_xla',
            "targets.t.backend: backend torch_xla does not support torch 2.13.0; torch_xla needs torch 2.1.0-2.9.0 (listed pairs), "
            "torch_tpu needs torch 2.11.0-2.15.0",
        ),
        ('torch: "2.10.0"', "targets.t.torch: torch 2.10.0 has no TPU backend; torch_xla needs torch 2.1.0-2.9.0"),
        (
            'torch: "2.9.0", backend: jax',
            "targets.t.backend: 'jax' is not valid; allowed: tpu-vm only: torch_xla or torch_tpu",
        ),
        (
            'torch: "2.13.0", python: "3.10"',
            "targets.t.python: Python 3.10 is outside torch_tpu 0.2.0's supported range 3.11-3.14",
        ),
        (
            'torch: "2.13.0", torch_xla: "2.9.0"',
            "targets.t.torch_xla: 'torch_xla' applies to backend torch_xla only, not torch_tpu",
        ),
        (
            'torch: "2.9.0", torch_tpu: "0.2.0"',
            "targets.t.torch_tpu: 'torch_tpu' applies to backend torch_tpu only, not torch_xla",
        ),
        (
            'torch: "2.13.0", torch_tpu: "0.1.0"',
            "targets.t.torch_tpu: torch_tpu 0.1.0 is not in envkit's matrix; supported: 0.2.0",
        ),
    ],
)
def test_bad_tpu_backend_settings_are_one_line(tmp_path, settings, expected):
    message = config_error(tmp_path, f"targets:\n  t: {{kind: tpu-vm, {settings}}}\n")
    assert expected in message


def test_torch_2_15_needs_torchvision_false(tmp_path):
    message = config_error(tmp_path, 'targets:\n  cpu: {kind: cpu, torch: "2.15.0"}\n')
    assert message.endswith(
        "targets.cpu.torchvision: torch 2.15.0 needs torchvision: false; no torchvision release supports torch 2.15 yet "
        "(0.29.x is built against torch 2.14)"
    )
    text = 'targets:\n  cpu: {kind: cpu, torch: "2.15.0", torchvision: false}\n'
    assert load_config(write_config(tmp_path, text)).targets["cpu"].torchvision is None


def test_unreleased_torch_patch(tmp_path):
    message = config_error(tmp_path, 'targets:\n  cpu: {kind: cpu, torch: "2.9.7"}\n')
    assert message.endswith("targets.cpu.torch: torch 2.9.7 was never released; releases of torch 2.9: 2.9.0, 2.9.1")


def test_cu132_for_new_releases(tmp_path):
    target = load_config(
        write_config(tmp_path, 'targets:\n  g: {kind: cuda, torch: "2.14.1", cuda: "13.2"}\n')
    ).targets["g"]
    assert (target.torch_variant, target.base_image, target.python) == (
        "cu132",
        "nvidia/cuda:13.2.0-base-ubuntu24.04",
        "3.12",
    )


@pytest.mark.parametrize(
    ("torch", "cuda", "variant"),
    [
        ("2.9.0", None, None),
        ("2.9.0", "12.8", None),
        ("2.9.0", "12.6", "cu126"),
        ("2.14.1", None, None),
        ("2.14.1", "13.2", "cu132"),
    ],
)
def test_the_default_indexs_own_cuda_build_is_the_default_and_has_no_local_tag(tmp_path, torch, cuda, variant):
    setting = f', cuda: "{cuda}"' if cuda else ""
    target = load_config(write_config(tmp_path, f'targets:\n  g: {{kind: cuda, torch: "{torch}"{setting}}}\n')).targets[
        "g"
    ]
    assert target.torch_variant == variant


def test_cuda_on_torch_2_15_is_the_default_indexs_13_2_build(tmp_path):
    target = load_config(
        write_config(tmp_path, 'targets:\n  g: {kind: cuda, torch: "2.15.0", torchvision: false}\n')
    ).targets["g"]
    assert (target.cuda, target.torch_variant, target.base_image) == (
        "13.2",
        None,
        "nvidia/cuda:13.2.0-base-ubuntu24.04",
    )


def test_cuda_python_must_match_the_default_base_image(tmp_path):
    message = config_error(tmp_path, 'targets:\n  gpu: {kind: cuda, torch: "2.9.0", python: "3.11"}\n')
    assert "nvidia/cuda:12.8.1-base-ubuntu24.04 (3.12); set base_image" in message


def test_a_cuda_target_on_the_python_image_installs_no_distro_python(tmp_path):
    text = 'targets:\n  gpu: {kind: cuda, torch: "2.9.0", python: "3.11", base_image: "127.0.0.1:5000/python:3.11-slim-bookworm"}\n'
    assert load_config(write_config(tmp_path, text)).targets["gpu"].apt_packages == ()
    text = 'targets:\n  gpu: {kind: cuda, torch: "2.9.0", python: "3.11", base_image: "ubuntu:22.04"}\n'
    assert load_config(write_config(tmp_path, text)).targets["gpu"].apt_packages == ("python3", "python3-venv")


def test_a_second_index_is_refused_in_one_line(tmp_path):
    message = config_error(
        tmp_path,
        'targets:\n  cpu: {kind: cpu, torch: "2.9.0", pip_extra_index_urls: ["https://mirror.example.com/simple"]}\n',
    )
    assert message.endswith(
        "targets.cpu.pip_extra_index_urls: a second index lets any package come from either one; envkit takes each "
        "package from one index: set pip_index_url to a mirror that serves them all, or find_links for single projects' pages"
    )


def test_gpu_list_that_is_not_integers(tmp_path):
    message = config_error(tmp_path, 'targets:\n  gpu: {kind: cuda, torch: "2.9.0", gpus: [0, "1;reboot"]}\n')
    assert "targets.gpu.gpus[1]" in message and "non-negative integers" in message


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ('apt_packages: ["curl; rm -rf /"]', "apt_packages[0]"),
        ('pip_packages: ["tqdm && curl evil"]', "pip_packages[0]"),
        ('env: {GREETING: "$(id)"}', "env.GREETING"),
        ('base_image: "python:3.11 && id"', "base_image"),
        ('pip_index_url: "https://mirror/simple;id"', "pip_index_url"),
        ('find_links: ["/opt/wheels`id`"]', "find_links[0]"),
        ('shm_size: "2g; id"', "shm_size"),
        ('pip_packages: ["scipy"]', "pip_packages[0]"),
    ],
)
def test_shell_metacharacters_are_rejected(tmp_path, setting, field):
    message = config_error(tmp_path, f'targets:\n  cpu:\n    kind: cpu\n    torch: "2.9.0"\n    {setting}\n')
    assert f"targets.cpu.{field}: " in message and "allowed:" in message


def test_unquoted_version_gets_a_hint(tmp_path):
    message = config_error(tmp_path, "targets:\n  cpu: {kind: cpu, torch: '2.9.0', python: 3.10}\n")
    assert message.endswith(
        'targets.cpu.python: 3.1 is not valid; allowed: Python major.minor, e.g. "3.11" (default: 3.11 on cpu '
        'and tpu-vm, the base OS\'s python3 on cuda); quote versions in YAML ("3.10", not 3.10)'
    )


def test_unknown_kind_lists_the_kinds(tmp_path):
    message = config_error(tmp_path, 'targets:\n  x: {kind: gpu, torch: "2.9.0"}\n')
    assert "targets.x.kind: 'gpu' is not valid; allowed: one of cpu, cuda, tpu-vm" in message


def test_unknown_cuda_variant_is_never_guessed(tmp_path):
    message = config_error(tmp_path, 'targets:\n  gpu: {kind: cuda, torch: "2.9.0", cuda: "12.4"}\n')
    assert "valid choices: 12.6, 12.8, 13.0" in message


def test_mismatched_torchvision(tmp_path):
    message = config_error(tmp_path, 'targets:\n  cpu: {kind: cpu, torch: "2.9.0", torchvision: "0.23.0"}\n')
    assert "valid choices: 0.24.x, or false to leave it out" in message


def test_wrong_libtpu(tmp_path):
    message = config_error(tmp_path, 'targets:\n  t: {kind: tpu-vm, torch: "2.9.0", libtpu: "0.0.20"}\n')
    assert "valid choice: 0.0.21" in message


def test_matrix_owned_packages_cannot_be_repinned(tmp_path):
    message = config_error(tmp_path, 'targets:\n  cpu: {kind: cpu, torch: "2.9.0", pip_packages: [Torch_XLA==2.8.0]}\n')
    assert "re-pins a package the matrix owns" in message


def test_kind_specific_keys(tmp_path):
    message = config_error(tmp_path, 'targets:\n  cpu: {kind: cpu, torch: "2.9.0", torch_xla: "2.9.0"}\n')
    assert "'torch_xla' applies to tpu-vm targets only, not cpu" in message


def test_bad_target_name(tmp_path):
    message = config_error(tmp_path, 'targets:\n  My_Target: {kind: cpu, torch: "2.9.0"}\n')
    assert "'My_Target' is not valid" in message and "lowercase letters" in message


def test_duplicate_key(tmp_path):
    message = config_error(
        tmp_path, 'targets:\n  cpu: {kind: cpu, torch: "2.9.0"}\n  cpu: {kind: cpu, torch: "2.8.0"}\n'
    )
    assert "envkit.yaml:3: targets.cpu: duplicate key" in message


def test_missing_certificate(tmp_path):
    message = config_error(
        tmp_path, 'targets:\n  cpu: {kind: cpu, torch: "2.9.0", ca_certificates: [certs/none.crt]}\n'
    )
    assert "certs/none.crt is not a file" in message


@pytest.mark.parametrize("text", ["", "- cpu\n", "targets: {}\n"])
def test_empty_or_wrong_shape(tmp_path, text):
    assert config_error(tmp_path, text)


def test_loading_does_not_depend_on_the_working_directory(tmp_path, monkeypatch, repo_root):
    shutil.copy(repo_root / "envkit.yaml", tmp_path / "envkit.yaml")
    monkeypatch.chdir(tmp_path)
    assert load_config().targets.keys() == load_config(repo_root / "envkit.yaml").targets.keys()


def test_image_targets_name_their_platforms(repo_root):
    config = load_config(repo_root / "envkit.yaml")
    assert {name: target.platforms for name, target in config.targets.items()} == {
        "cpu": ("linux/amd64", "linux/arm64"),
        "cuda": ("linux/amd64",),
        "tpu-vm": ("linux/amd64",),
        "colab-tpu": (),
        "colab-t4": (),
        "kaggle-tpu": (),
    }


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            '{kind: cuda, torch: "2.9.0", cuda: "12.8", platforms: [linux/arm64]}',
            "targets.t.platforms: linux/arm64: PyPI's aarch64 torch 2.9.0 is the CPU build, so an arm64 cuda image "
            "would train on the CPU; a cuda target builds for linux/amd64 only",
        ),
        (
            '{kind: tpu-vm, torch: "2.9.0", platforms: [linux/amd64, linux/arm64]}',
            "targets.t.platforms: linux/arm64: a tpu-vm target builds for linux/amd64 only",
        ),
        (
            '{kind: cpu, torch: "2.9.0", platforms: [linux/riscv64]}',
            "targets.t.platforms[0]: 'linux/riscv64' is not valid",
        ),
        (
            '{platform: colab, accelerator: T4, torch: "2.9.0", platforms: [linux/amd64]}',
            "targets.t.platforms: 'platforms' does not apply to a notebook target",
        ),
    ],
)
def test_a_platform_a_target_cannot_build_for_is_one_line(tmp_path, target, message):
    assert message in config_error(tmp_path, f"targets:\n  t: {target}\n")


def test_a_cpu_target_builds_for_both_architectures_by_default(tmp_path):
    config = load_config(write_config(tmp_path, 'targets:\n  cpu: {kind: cpu, torch: "2.9.0"}\n'))
    assert config.targets["cpu"].platforms == ("linux/amd64", "linux/arm64")


# Put together here so that this file itself holds no token a scanner would flag.
HF_TOKEN = "hf" + "_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
AWS_KEY = "AKIA" + "IOSFODNN7EXAMPLE"


@pytest.mark.parametrize(
    ("setting", "path", "why"),
    [
        (f"env: {{HF_TOKEN: {HF_TOKEN}}}", "targets/cpu/env/HF_TOKEN", "holds a Hugging Face token"),
        (
            f"env: {{AWS_ACCESS_KEY_ID: {AWS_KEY}}}",
            "targets/cpu/env/AWS_ACCESS_KEY_ID",
            'holds a secret detect-secrets calls "AWS Access Key"',
        ),
        ("env: {DATABASE_URL: 'postgresql://admin:pw@db/x'}", "targets/cpu/env/DATABASE_URL", "holds a password"),
        ("env: {WANDB_API_KEY: 0123456789abcdef0123}", "targets/cpu/env/WANDB_API_KEY", "holds a value its name"),
        ("pip_index_url: https://Tk9xQ2vR7@pkgs.example.org/me/", "targets/cpu/pip_index_url", "holds a token as"),
        ("pip_index_url: 'https://pkgs.example.org/simple?token=Tk9xQ2vR7'", "targets/cpu/pip_index_url", "holds a"),
        ("find_links: ['https://x.example.org/w?X-Amz-Signature=ab12']", "targets/cpu/find_links/0", "holds a token"),
    ],
)
def test_a_secret_anywhere_in_envkit_yaml_is_refused_by_its_key_path_unless_listed(tmp_path, setting, path, why):
    """Before: a token in a target's env: became `ENV HF_TOKEN=...` in the rendered Dockerfile and the image's
    config, and an index URL's token (as its user or in its query) its ARG default: every string of envkit.yaml is
    now read by one check where it is loaded, which names the key path and never the value."""
    text = f'targets:\n  cpu: {{kind: cpu, torch: "2.9.0", {setting}}}\n'
    message = config_error(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'envkit.yaml'}: {path} {why}"), message
    assert "Tk9xQ2vR7" not in message and HF_TOKEN not in message and AWS_KEY not in message and ":pw@" not in message
    assert "list envkit.yaml under include_secrets" in message
    load_config(write_config(tmp_path, "include_secrets: [envkit.yaml]\n" + text))  # the one way in


@pytest.mark.parametrize(
    "setting",
    [
        "env: {TOKENIZERS_PARALLELISM: 'false', PAD_TOKEN: '<pad>', CACHE_KEY: 0123456789abcdef}",
        "pip_index_url: https://pkgs.example.org/simple",
        "find_links: ['https://download.example.org/whl/torch_stable.html?page=2']",
        "env: {DATABASE_URL: 'postgresql://admin@db/x', DOCS: 'https://example.org/a?design=x&key_id'}",
    ],
)
def test_settings_that_only_look_like_secrets_load(tmp_path, setting):
    load_config(write_config(tmp_path, f'targets:\n  cpu: {{kind: cpu, torch: "2.9.0", {setting}}}\n'))


def test_the_recipes_packages_go_only_into_a_project_that_runs_a_seed_recipe(tmp_path, capsys):
    """Issue 40 §16: before, tqdm (a package of envkit's recipes) went into every lock of a user's project; now a
    project of its own commands gets its requirements (and the run wrapper needs nothing: standard library)."""
    from envkit.cli import main

    project = tmp_path / "project"
    shutil.copytree(paths.TESTS / "example_project", project)
    assert main(["init", "--dir", str(project)]) == 0
    users = load_config(project / "envkit.yaml")
    assert all(
        not any(p.startswith("tqdm") for p in target.pip_packages) and "tabulate==0.9.0" in target.pip_packages
        for target in users.targets.values()
    )
    ours = load_config(paths.REPO_ROOT / "envkit.yaml")  # its experiments run seed recipes: their tqdm stays
    assert all("tqdm==4.67.1" in target.pip_packages for target in ours.targets.values() if target.base_image)


@pytest.mark.parametrize(
    ("setting", "secret"),
    [
        (f"base_image: '{HF_TOKEN} x'", HF_TOKEN),  # a string of the wrong form
        (f"pip_index_url: [{AWS_KEY}]", AWS_KEY),  # the wrong type
        ("env: {X: ['https://admin:hunter2pass@db.example.org/x']}", "hunter2pass"),
        ("env: {HF_TOKEN: 'abc$defghijk'}", "abc$defghijk"),  # a secret by its key's name
        (f"env: {{{HF_TOKEN}: [1]}}", HF_TOKEN),  # a key, in the error line's path
        (f"{HF_TOKEN}: 1", HF_TOKEN),  # an unknown key
        (f"python: '{'x' * 50} {HF_TOKEN}'", HF_TOKEN[:6]),  # a value cut to its first 57 characters
    ],
)
def test_a_schema_error_never_shows_a_secret_it_quotes(tmp_path, setting, secret):
    """Issue 39: before, the schema's error line quoted the value it rejected whole, before the secret check ran."""
    message = config_error(tmp_path, f'targets:\n  cpu: {{kind: cpu, torch: "2.9.0", {setting}}}\n')
    assert secret not in message and "redact" in message, message  # a value cut at 57 characters: redact...


@pytest.mark.parametrize(
    ("entry", "secret"),
    [
        (f"args: {HF_TOKEN}", HF_TOKEN),  # the wrong type
        (f"{HF_TOKEN}: 1", HF_TOKEN),  # an unknown key
    ],
)
def test_an_experiments_schema_error_never_shows_a_secret(tmp_path, entry, secret):
    text = f'experiments:\n  train: {{summary: t, command: [python, t.py], {entry}}}\ntargets:\n  cpu: {{kind: cpu, torch: "2.9.0"}}\n'
    message = config_error(tmp_path, text)
    assert secret not in message and "redacted]" in message, message


def test_the_secret_check_names_a_key_that_holds_a_secret_without_showing_it(tmp_path):
    message = config_error(tmp_path, f'targets:\n  cpu: {{kind: cpu, torch: "2.9.0", env: {{{HF_TOKEN}: x}}}}\n')
    assert HF_TOKEN not in message and "targets/cpu/env/[a Hugging Face token, redacted]" in message, message


@pytest.mark.parametrize(
    ("requirement", "reason"),
    [
        ("foo~=1", "~= needs two release parts"),
        ("foo==1.*.2", "Expected comma"),
        ("foo~=1.0.*", ".* suffix can only be used with `==` or `!=` operators"),
        ("foo==1.0+", "Expected comma"),
    ],
)
def test_a_pip_package_the_schema_passes_but_packaging_cannot_read_is_one_line(tmp_path, requirement, reason):
    """Before: `pip_packages: [foo~=1]` passed the schema's pattern, and packaging's InvalidRequirement reached the
    user as a traceback (rc 1) from every command that loads the project, render included."""
    message = config_error(
        tmp_path, f'targets:\n  cpu: {{kind: cpu, torch: "2.9.0", pip_packages: ["{requirement}"]}}\n'
    )
    assert message.startswith(f"{tmp_path / 'envkit.yaml'}:2: targets.cpu.pip_packages[0]: {requirement!r} is not a ")
    assert reason in message and "allowed: a pip requirement with a version, such as name==1.2" in message, message
