"""Rendering: golden files, determinism, all-or-nothing writes, staleness checks."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from paths import GOLDEN, REPO_ROOT

from envkit.errors import EnvkitError
from envkit.lock.lockfile import read_lock
from envkit.project.load import load_config
from envkit.render import output as rendered
from envkit.render import target_files as render
from envkit.support import atomic, provenance

GOLDEN_TARGETS = ["cpu", "cuda", "tpu-vm", "cpu-local", "tpu-vm-tpu"]


@pytest.fixture(scope="module")
def golden_config(repo_root):
    # The fixture lives beside its golden files; templates come from the repo.
    return load_config(GOLDEN / "envkit.yaml")._replace(root=repo_root)


@pytest.fixture(scope="module")
def repo_config(repo_root):
    return load_config(repo_root / "envkit.yaml")


def by_path(files):
    return {file.path.as_posix(): file for file in files}


@pytest.mark.parametrize("target", GOLDEN_TARGETS)
def test_golden_files(golden_config, update_golden, target):
    # Locks are render inputs: tests/golden/<case>/requirements.lock where a case has one.
    files = render.render_targets(golden_config, [target], locks=GOLDEN)
    wrapper = provenance.shipped()  # envkit_run.py and its modules
    assert [file.path.name for file in files] == ["Dockerfile", "run.sh", ".dockerignore", *wrapper]
    # The run wrapper is copied, not rendered: its modules themselves, byte for byte.
    for file, path in zip(files[3:], wrapper.values(), strict=True):
        assert file.text == path.read_text(encoding="utf-8")
    del files[3:]
    if update_golden:
        rendered.write(GOLDEN, files)
    for file in files:
        expected = (GOLDEN / file.path).read_text(encoding="utf-8")
        assert file.text == expected, (
            f"{file.path} differs from its golden file; rerun with --update-golden if intended"
        )


def test_committed_docker_dir_matches_a_fresh_render(repo_config, repo_root):
    files = render.render_targets(repo_config, list(repo_config.images))
    assert rendered.stale(repo_root / "docker", files) == []
    assert {file.path.parts[0] for file in files} == {"cpu", "cuda", "tpu-vm"}


def test_rendering_is_deterministic(repo_config, tmp_path):
    """Two `envkit render --all` processes, with different hash seeds and caches (one cold), write the same bytes."""
    for run, seed in (("a", "0"), ("b", "4242")):
        env = {
            **os.environ,
            "PYTHONHASHSEED": seed,
            "ENVKIT_CACHE_DIR": str(tmp_path / f"cache-{run}"),
            "PYTHONPATH": str(REPO_ROOT),
        }
        subprocess.run(
            [
                sys.executable,
                "-m",
                "envkit",
                "render",
                "--all",
                "--config",
                str(repo_config.path),
                "--output",
                str(tmp_path / run),
            ],
            check=True,
            capture_output=True,
            env=env,
        )
    first = {p.relative_to(tmp_path / "a"): p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file()}
    second = {p.relative_to(tmp_path / "b"): p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()}
    assert first == second and len(first) == 3 * (len(render.FILES) + len(provenance.shipped()))
    assert all(b"\r\n" not in content for content in first.values())


def test_run_sh_is_executable_and_others_are_not(repo_config, tmp_path):
    rendered.write(tmp_path, render.render_targets(repo_config, ["cpu"]))
    assert os.access(tmp_path / "cpu" / "run.sh", os.X_OK)
    assert not os.access(tmp_path / "cpu" / "Dockerfile", os.X_OK)


def test_requirements_per_kind(golden_config, repo_config):
    assert repo_config.targets["cpu"].requirements() == ["torch==2.9.0+cpu", "torchvision==0.24.0+cpu", "tqdm==4.67.1"]
    # CUDA 12.8 is the default index's own build of torch 2.9.0: plain versions, one index.
    assert repo_config.targets["cuda"].requirements() == ["torch==2.9.0", "torchvision==0.24.0", "tqdm==4.67.1"]
    assert repo_config.targets["tpu-vm"].requirements() == [
        "torch==2.9.0",
        "torch_xla[tpu]==2.9.0",
        "libtpu==0.0.21",
        "torchvision==0.24.0",
        "tqdm==4.67.1",
    ]
    assert golden_config.targets["cpu-local"].requirements() == ["torch==2.13.0+cpu", "tqdm==4.67.1", "numpy==2.1.3"]


def test_a_locked_target_installs_exactly_its_lock_and_records_its_sha(repo_config, repo_root):
    lock = read_lock(repo_root / "docker" / "tpu-vm" / "requirements.lock")
    dockerfile = by_path(render.render_targets(repo_config, ["tpu-vm"]))["tpu-vm/Dockerfile"].text
    assert (
        "pip install \\\n      --require-hashes --no-deps --only-binary=:all: --find-links /wheels \\\n" in dockerfile
    )
    assert "      -r /opt/envkit/requirements.lock\n" in dockerfile
    assert "COPY requirements.lock /opt/envkit/requirements.lock\n" in dockerfile
    assert f"ENV ENVKIT_LOCK_SHA256={lock.sha256}\n" in dockerfile
    assert f'io.envkit.lock.sha256="{lock.sha256}"' in dockerfile
    assert "torch==" not in dockerfile and "--extra-index-url" not in dockerfile and "io.envkit.lock=" not in dockerfile


def test_an_unlocked_target_is_flagged_in_its_dockerfile_and_labels(repo_config):
    dockerfile = by_path(render.render_targets(repo_config, ["cpu"]))["cpu/Dockerfile"].text
    assert "# UNLOCKED: " in dockerfile and 'io.envkit.lock="unlocked"' in dockerfile
    assert "ENVKIT_LOCK_SHA256" not in dockerfile and "requirements.lock" not in dockerfile
    assert "torch==2.9.0+cpu \\\n" in dockerfile
    # Unlocked, but still one index per package: torch and torchvision from their project pages only.
    pages = "https://download.pytorch.org/whl/cpu/torch/ https://download.pytorch.org/whl/cpu/torchvision/"
    assert f'ARG TORCH_FIND_LINKS="{pages}"\n' in dockerfile
    assert 'PIP_FIND_LINKS="${TORCH_FIND_LINKS}" pip install --find-links /wheels \\\n' in dockerfile


def test_no_template_or_rendered_dockerfile_names_a_second_index(repo_root):
    """pip takes each name from whichever index has the best match: one index per package, always."""
    files = [*repo_root.glob("docker/*/Dockerfile"), *repo_root.glob("templates/**/*.j2"), *GOLDEN.glob("*/Dockerfile")]
    assert len(files) >= 9
    assert [
        str(path) for path in files if "extra-index-url" in path.read_text() or "EXTRA_INDEX" in path.read_text()
    ] == []


def test_a_locked_cpu_target_takes_torch_from_pytorchs_pages_and_its_base_by_the_locks_digest(golden_config):
    dockerfile = by_path(render.render_targets(golden_config, ["cpu-local"], locks=GOLDEN))["cpu-local/Dockerfile"].text
    lock = read_lock(GOLDEN / "cpu-local" / "requirements.lock")
    digest = lock.base_image.split("@")[1]
    assert f"ARG BASE_IMAGE=envkit-test/debian:bookworm@{digest}\n" in dockerfile
    assert f"ARG BASE_DIGEST={digest}\n" in dockerfile
    assert 'ARG TORCH_FIND_LINKS="https://download.pytorch.org/whl/cpu/torch/"\n' in dockerfile
    assert "--index-url" not in dockerfile.replace("ARG PIP_INDEX_URL", "")


def test_a_configured_base_digest_is_used_as_is(golden_config):
    digest = "sha256:" + "ab" * 32
    target = golden_config.targets["cpu"]._replace(base_image=f"python:3.11-slim-bookworm@{digest}")
    assert render.base_reference(target, None) == (f"python:3.11-slim-bookworm@{digest}", digest)
    assert render.base_reference(golden_config.targets["cpu"], None) == ("python:3.11-slim-bookworm", None)


def test_a_stale_lock_is_refused_in_one_line(golden_config, tmp_path):
    (tmp_path / "cpu-local").mkdir()
    text = (GOLDEN / "cpu-local" / "requirements.lock").read_text()
    (tmp_path / "cpu-local" / "requirements.lock").write_text(text.replace("# inputs-sha256: ", "# inputs-sha256: 0"))
    with pytest.raises(
        EnvkitError,
        match=r"^target cpu-local: .* was resolved from other inputs .*: run `envkit lock --target cpu-local`",
    ):
        render.render_targets(golden_config, ["cpu-local"], locks=tmp_path)


def test_a_lock_whose_base_digest_was_edited_is_refused_and_never_reaches_from(golden_config, tmp_path):
    """Issue 39 §17: an edited `# base-image: ...@sha256:` line passed the gate and render wrote it into FROM."""
    (tmp_path / "cpu-local").mkdir()
    text = (GOLDEN / "cpu-local" / "requirements.lock").read_text()
    edited = text.replace("@sha256:cae662172fd4", "@sha256:000000000000", 1)
    assert edited != text
    (tmp_path / "cpu-local" / "requirements.lock").write_text(edited)
    with pytest.raises(
        EnvkitError,
        match=r"^target cpu-local: .*: its packages or its base image's digest were edited after it was locked",
    ):
        render.render_targets(golden_config, ["cpu-local"], locks=tmp_path)


def test_no_default_index_is_named(repo_config):
    # pip's default index applies unless a target sets pip_index_url.
    assert repo_config.images, "the repository has no image target"
    for target in repo_config.images:
        dockerfile = by_path(render.render_targets(repo_config, [target]))[f"{target}/Dockerfile"].text
        assert "ARG PIP_INDEX_URL\n" in dockerfile


def test_torch_xla_alone_gets_pjrt_device(golden_config):
    def run_sh(name: str) -> str:
        return by_path(render.render_targets(golden_config, [name], locks=GOLDEN))[f"{name}/run.sh"].text

    assert "-e PJRT_DEVICE=TPU" in run_sh("tpu-vm")
    assert "PJRT_DEVICE" not in run_sh("tpu-vm-tpu") and "TPU_SKIP_MDS_QUERY" not in run_sh("tpu-vm-tpu")


def test_older_tpu_release_uses_its_find_links(golden_config):
    dockerfile = by_path(render.render_targets(golden_config, ["tpu-vm"], locks=GOLDEN))["tpu-vm/Dockerfile"].text
    assert "--find-links https://storage.googleapis.com/libtpu-wheels/index.html" in dockerfile
    assert "ARG PIP_INDEX_URL=https://mirror.example.com/pypi/simple" in dockerfile


def test_dependencies_come_before_recipes_and_certificates_before_https(repo_config):
    assert repo_config.images, "the repository has no image target"
    for target in repo_config.images:
        dockerfile = by_path(render.render_targets(repo_config, [target]))[f"{target}/Dockerfile"].text
        order = [
            dockerfile.index("apt-get install"),
            dockerfile.index("update-ca-certificates"),
            dockerfile.index("python3 -m venv /opt/venv"),
            dockerfile.index("ARG PIP_NO_INDEX="),  # late: changing it keeps the OS layers cached
            dockerfile.index("pip install"),
            dockerfile.index("COPY project/"),
            dockerfile.index("ARG ENVKIT_REVISION"),
        ]
        assert order == sorted(order), target
        assert "--mount=type=bind,source=wheels,target=/wheels" in dockerfile
        assert "--mount=type=cache,target=/root/.cache/pip" in dockerfile
        assert f'io.envkit.config-hash="{repo_config.targets[target].config_hash}"' in dockerfile
        assert ("USER 10001:10001" in dockerfile) == (target != "tpu-vm")


def test_output_path_that_is_a_file(repo_config, tmp_path):
    (tmp_path / "out").write_text("keep me")
    with pytest.raises(EnvkitError, match="is a file"):
        rendered.write(tmp_path / "out", render.render_targets(repo_config, ["cpu"]))
    assert (tmp_path / "out").read_text() == "keep me"


def test_output_under_a_file(repo_config, tmp_path):
    (tmp_path / "blocker").write_text("")
    with pytest.raises(EnvkitError, match="cannot write to"):
        rendered.write(tmp_path / "blocker" / "docker", render.render_targets(repo_config, ["cpu"]))


def test_a_failure_part_way_writes_nothing(repo_config, tmp_path):
    output = tmp_path / "docker"
    output.mkdir()
    (output / "tpu-vm").write_text("a file where a directory must go")
    with pytest.raises(EnvkitError, match="cannot write to"):
        rendered.write(output, render.render_targets(repo_config, list(repo_config.images)))
    assert sorted(p.name for p in output.iterdir()) == ["tpu-vm"], "cpu/ and cuda/ must be rolled back"


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_output(repo_config, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    with pytest.raises(EnvkitError, match="cannot write to"):
        rendered.write(locked / "docker", render.render_targets(repo_config, ["cpu"]))


def test_unwritable_output_even_as_root(repo_config, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / "docker" / "cpu"))

    monkeypatch.setattr(atomic, "_staged", refuse)
    with pytest.raises(EnvkitError, match="cannot write to .*: Permission denied; choose a writable --output DIR"):
        rendered.write(tmp_path / "docker", render.render_targets(repo_config, ["cpu"]))
    assert not (tmp_path / "docker").exists(), "directories made for the failed write are removed"


def test_unchanged_files_are_not_rewritten(repo_config, tmp_path):
    files = render.render_targets(repo_config, ["cpu"])
    assert len(rendered.write(tmp_path, files)) == len(render.FILES) + len(provenance.shipped())
    before = {p.name: p.stat().st_ino for p in (tmp_path / "cpu").iterdir()}
    (tmp_path / "cpu" / "run.sh").chmod(0o644)
    assert rendered.write(tmp_path, files) == [tmp_path / "cpu" / "run.sh"]
    after = {p.name: p.stat().st_ino for p in (tmp_path / "cpu").iterdir()}
    assert before["Dockerfile"] == after["Dockerfile"] and before["run.sh"] != after["run.sh"]


def test_a_directory_in_place_of_a_file_writes_nothing(repo_config, tmp_path):
    (tmp_path / "cuda" / "run.sh").mkdir(parents=True)
    with pytest.raises(EnvkitError, match="run.sh: a directory is in the way"):
        rendered.write(tmp_path, render.render_targets(repo_config, ["cpu", "cuda"]))
    assert not (tmp_path / "cpu").exists() and sorted(p.name for p in (tmp_path / "cuda").iterdir()) == ["run.sh"]


def test_stale_reports_changed_missing_and_mode(repo_config, tmp_path):
    files = render.render_targets(repo_config, ["cpu"])
    rendered.write(tmp_path, files)
    assert rendered.stale(tmp_path, files) == []
    (tmp_path / "cpu" / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "cpu" / ".dockerignore").unlink()
    (tmp_path / "cpu" / "run.sh").chmod(0o644)
    problems = rendered.stale(tmp_path, files)
    assert problems[0].startswith(f"{tmp_path / 'cpu' / 'Dockerfile'}: stale (")
    assert problems[1].endswith("run.sh: should be executable")
    assert problems[2].endswith(".dockerignore: missing")


def test_strict_undefined_turns_template_mistakes_into_one_line(repo_config, tmp_path):
    (tmp_path / "templates").mkdir()
    for name in ("Dockerfile.j2", "run.sh.j2", "dockerignore.j2"):
        (tmp_path / "templates" / name).write_text("{{ no_such_variable }}\n")
    broken = repo_config._replace(root=tmp_path)
    with pytest.raises(EnvkitError, match="cannot render Dockerfile.j2: 'no_such_variable' is undefined"):
        render.render_targets(broken, ["cpu"])


@pytest.mark.parametrize("wanted", ["3.11", "3.12"])
def test_build_stops_with_one_line_when_the_base_has_another_python(tmp_path, repo_root, wanted):
    config_path = tmp_path / "envkit.yaml"
    config_path.write_text(f'targets:\n  cpu: {{kind: cpu, torch: "2.9.0", python: "{wanted}"}}\n')
    config = load_config(config_path)._replace(root=repo_root)
    dockerfile = by_path(render.render_targets(config, ["cpu"]))["cpu/Dockerfile"].text
    check = re.search(r"python3 -c ('.*?') \\", dockerfile).group(1)
    result = subprocess.run([sys.executable, "-c", shlex.split(check)[0]], capture_output=True, text=True)
    here = "{}.{}".format(*sys.version_info[:2])
    if wanted == here:
        assert (result.returncode, result.stderr) == (0, "")
    else:
        assert result.returncode == 1
        assert (
            result.stderr
            == f"envkit: the base image has Python {here} but target cpu needs {wanted}; set its python or base_image\n"
        )


def test_a_project_renders_with_envkits_templates_and_overrides_them_file_by_file(repo_config, tmp_path):
    """Before: a project without templates/ beside its config could not render (an installed envkit shipped none)."""
    shipped = {file.path: file.text for file in render.render_targets(repo_config, ["cpu"])}
    elsewhere = repo_config._replace(root=tmp_path)
    assert {file.path: file.text for file in render.render_targets(elsewhere, ["cpu"])} == shipped
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "dockerignore.j2").write_text("# the project's own\n")
    files = {file.path.name: file.text for file in render.render_targets(elsewhere, ["cpu"])}
    assert files[".dockerignore"] == "# the project's own\n"
    assert files["Dockerfile"] == shipped[Path("cpu/Dockerfile")] and files["run.sh"] == shipped[Path("cpu/run.sh")]
    # the memo sees an override appear where there was none: the loader records where it looked
    from envkit.support.bounded_load import recording

    with recording() as read:
        render.render_targets(elsewhere, ["cpu"])
    assert str(tmp_path / "templates" / "Dockerfile.j2") in read


def test_missing_packaged_templates_are_one_line(repo_config, tmp_path, monkeypatch):
    monkeypatch.setattr(render, "packaged_templates", lambda: tmp_path / "gone")
    with pytest.raises(EnvkitError, match="envkit's templates are missing at .*gone: reinstall envkit"):
        render.render_targets(repo_config._replace(root=tmp_path), ["cpu"])


def test_render_knows_the_mark_of_every_file_it_writes(repo_root):
    """render --all removes only the files it wrote, each found by its mark (a lock is `envkit lock`'s)."""
    marks = rendered.envkit_marks()
    assert set(marks) == {*render.FILES, *provenance.shipped()}
    for name, mark in marks.items():
        for path in (repo_root / "docker").glob(f"*/{name}"):
            assert mark in path.read_bytes()[:512], path


def test_a_file_without_envkits_mark_is_never_overwritten_and_nothing_is_written(repo_config, tmp_path):
    files = render.render_targets(repo_config, ["cpu", "cuda"])
    (tmp_path / "cuda").mkdir()
    (tmp_path / "cuda" / "run.sh").write_text("#!/bin/sh\n# my own launcher\n")
    with pytest.raises(EnvkitError) as refused:
        rendered.write(tmp_path, files)
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'cuda' / 'run.sh'} is not envkit's") and "\n" not in message
    assert (tmp_path / "cuda" / "run.sh").read_text() == "#!/bin/sh\n# my own launcher\n"
    assert not (tmp_path / "cpu").exists()
    # envkit's own file, edited by hand, still carries the mark: render restores it
    (tmp_path / "cuda" / "run.sh").unlink()
    rendered.write(tmp_path, files)
    dockerfile = tmp_path / "cpu" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN echo edited\n")
    assert rendered.write(tmp_path, files) == [dockerfile]


def test_render_all_keeps_the_users_files_and_a_notebook_the_user_moved(tmp_path, capsys, monkeypatch):
    from project_copy import copy_project

    from envkit.cli import main

    project = copy_project(tmp_path / "project")
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    moved = project / "notebooks" / "kaggle" / "gpu-mnist.ipynb"
    moved.parent.mkdir()
    moved.write_bytes((project / "notebooks" / "colab-t4" / "gpu-mnist.ipynb").read_bytes())
    mine = project / "docker" / "mine" / "Dockerfile"
    mine.parent.mkdir()
    mine.write_text("FROM scratch\n")
    config = str(project / "envkit.yaml")
    assert main(["render", "--all", "--config", config]) == 0
    assert moved.is_file() and mine.read_text() == "FROM scratch\n"
    assert main(["render", "--all", "--check", "--config", config]) == 0, capsys.readouterr()


def test_cuda_s_run_sh_checks_gpus_by_kinds_yaml_s_syntax(repo_config, monkeypatch):
    """The template gets GPUS's syntax as data (kinds.yaml's gpu_indices), the one home make and doctor read."""
    monkeypatch.setattr(render.kinds, "gpu_indices", lambda: "[0-3]")
    (run_sh,) = (file for file in render.render_targets(repo_config, ["cuda"]) if file.path.name == "run.sh")
    assert "elif [[ $gpus =~ ^[0-3]$ ]]; then\n" in run_sh.text


def test_run_sh_names_a_variable_envkit_env_names_but_nobody_set(repo_config, tmp_path):
    """envkit launch --on hosts prints no --env value (each host exports it, run.sh passes it by name): before, a
    host that forgot one ran the program without it and said nothing; now run.sh stops in one line naming it."""
    script = tmp_path / "run.sh"
    script.write_text(by_path(render.render_targets(repo_config, ["cpu"]))["cpu/run.sh"].text)
    script.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "ENVKIT_DRY_RUN": "1", "ENVKIT_ENV": "WANDB_API_KEY"}
    done = subprocess.run([str(script), "python", "t.py"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "run.sh: error: ENVKIT_ENV names WANDB_API_KEY, which is not set here; export it first\n"
    done = subprocess.run(
        [str(script), "python", "t.py"], capture_output=True, text=True, env={**env, "WANDB_API_KEY": "v4lue"}
    )
    assert done.returncode == 0 and " -e WANDB_API_KEY " in done.stdout and "v4lue" not in done.stdout, done.stderr
