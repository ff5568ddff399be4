"""Notebooks of a project's command experiments (issue 25 §8): the project's files, its command, the run wrapper."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import nbformat
import pytest
from command_project import TRAIN, command_project, git
from project_copy import copy_project

from envkit.cli import main
from envkit.notebook import builder, embedded, runtime, runtime_shared
from envkit.project.load import load_config
from envkit.support import provenance


def envkit(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def project(tmp_path) -> Path:
    return command_project(tmp_path / "project")


def settings_of(notebook: nbformat.NotebookNode) -> dict:
    cell = ast.parse(next(cell for cell in notebook.cells if cell.id == "settings").source)
    return ast.literal_eval(next(node.value for node in cell.body if isinstance(node, ast.Assign)))


def render(project: Path, experiment: str = "gpu-train", target: str = "colab-t4") -> nbformat.NotebookNode:
    text = builder.render_notebook(load_config(project / "envkit.yaml"), experiment, target).text
    notebook = nbformat.reads(text, as_version=4)
    nbformat.validate(notebook)
    return notebook


def test_it_carries_the_tracked_project_files_with_their_sha256_and_runs_the_command(project):
    notebook = render(project)
    settings = settings_of(notebook)
    carried = settings["files"]["program"]
    # git's list less .dockerignore's, less what render writes (docker/, notebooks/: one cannot carry itself)
    assert {"project/train.py", "project/helper.py", "project/run.sh", "project/logo.png"} <= set(carried)
    assert "project/envkit.yaml" in carried and "project/recipes/mnist.py" in carried
    assert not [path for path in carried if path.startswith(("project/docker/", "project/notebooks/"))]
    assert "project/data/ignored.csv" not in carried and "project/untracked.py" not in carried
    for path, sha in carried.items():
        assert hashlib.sha256((project / path.removeprefix("project/")).read_bytes()).hexdigest() == sha
    assert (settings["program"], settings["root"]) == (["python", "train.py", "--epochs", "2"], "project")
    assert settings["experiment_env"] == {"FLAVOUR": "notebook"}
    # the user's flags only, in CPU mode too: nothing of envkit's recipes is forced on the command
    assert [(run["args"], run["cpu_args"]) for run in settings["runs"]] == [([], [])]
    # the command's script is the visible cell, byte for byte; the rest is in the archive
    [shown] = [cell for cell in notebook.cells if cell.source.startswith("%%writefile ")]
    assert shown.source == f"%%writefile project/train.py\n{TRAIN}"
    assert "`python train.py --epochs 2`" in notebook.cells[0].source
    assert "## 4. The program" in "".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    assert notebook.metadata.envkit.files["project/logo.png"] == carried["project/logo.png"]
    assert next(c for c in notebook.cells if c.id == "run").source == (
        "results = nb.run_program(SETTINGS, environment, runtime)"
    )


def test_a_command_without_a_script_shows_no_file_and_carries_them_all(project):
    notebook = render(project, "gpu-shell")
    assert settings_of(notebook)["program"] == ["sh", "run.sh"]
    [shown] = [cell for cell in notebook.cells if cell.source.startswith("%%writefile ")]
    assert shown.source.startswith("%%writefile project/run.sh\n")  # its script is the shell's
    config = project / "envkit.yaml"
    config.write_text(config.read_text().replace("command: [sh, run.sh]", "command: [python, -m, helper]"))
    notebook = render(project, "gpu-shell")
    assert not [cell for cell in notebook.cells if cell.source.startswith("%%writefile ")]
    assert "project/helper.py" in settings_of(notebook)["files"]["program"]


def test_a_file_over_the_cap_is_refused_in_one_line_naming_it(capsys, project, tmp_path, monkeypatch):
    (project / "weights.bin").write_bytes(b"\0" * (embedded.FILE_CAP_BYTES + 1))
    git(project, "add", "weights.bin")
    monkeypatch.chdir(tmp_path)
    argv = ["notebook", "gpu-train", "--target", "colab-t4", "--config", str(project / "envkit.yaml")]
    code, out, err = envkit(capsys, *argv)
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith("envkit: error: weights.bin (2.0 MB): over the 2 MB a notebook embeds per file;")
    assert "data is downloaded in the notebook, never embedded" in err
    assert not list(tmp_path.glob("*.ipynb"))
    # the whole set is capped by the project's files_limit_mb (envkit.project.files)
    (project / "weights.bin").write_bytes(b"\0" * 1_500_000)
    config = project / "envkit.yaml"
    config.write_text("files_limit_mb: 1\n" + config.read_text())
    code, out, err = envkit(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and "over the 1 MB limit for an image or a notebook" in err, err
    # the recipe experiments carry their recipe's modules, as before: the project's files are not theirs
    assert envkit(capsys, "notebook", "gpu-mnist", "--target", "colab-t4", "--config", str(config))[0] == 0


def unpack(notebook: nbformat.NotebookNode, work: Path, monkeypatch) -> dict:
    """The notebook's settings cell and files cell run in ``work``, its %%writefile cells written."""
    monkeypatch.setenv("ENVKIT_NOTEBOOK_WORK", str(work))
    namespace: dict = {}
    for cell in notebook.cells:
        if cell.id in ("settings", "files"):
            exec(cell.source, namespace)  # standard library only; the settings cell moves into work
        elif cell.source.startswith("%%writefile "):
            head, body = cell.source.split("\n", 1)
            (work / head.split(maxsplit=1)[1].strip("'\"")).write_text(body)
    return namespace["SETTINGS"]


@pytest.mark.parametrize("packages", ["runtime", "lock"])
def test_the_command_runs_from_the_projects_root_through_the_run_wrapper(project, tmp_path, monkeypatch, packages):
    work = tmp_path / "work"
    monkeypatch.chdir(tmp_path)
    settings = unpack(render(project), work, monkeypatch)
    for group in ("helper", "program"):
        runtime.check_files(settings, group)
    monkeypatch.setenv(runtime_shared.CPU_MODE, str(tmp_path))
    if packages == "lock":  # a venv of this interpreter stands in for the lock's: the command must get its Python
        venv.create(work / "venv")
        # This interpreter's packages (pytest among them), by a .pth file: a venv's system site-packages are the
        # base Python's, which on a fresh machine hold no pytest.
        site_packages = next((work / "venv" / "lib").glob("python3*/site-packages"))
        (site_packages / "this-interpreter.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        python = str(work / "venv" / "bin" / "python")
    else:
        python = sys.executable
    # CPU mode's lock, in the wheelhouse, of a package the program's Python has: not the notebook's
    # requirements.lock, which the run wrapper sits beside
    version = subprocess.run([python, "-c", "from importlib import metadata; print(metadata.version('pytest'))"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"pytest=={version}\n")
    # the platform's Python settings (Colab sets PYTHONPATH): a lock's program never sees them
    (tmp_path / "platform").mkdir()
    (tmp_path / "platform" / "sitecustomize.py").write_text(f"open({str(tmp_path / 'leaked')!r}, 'w')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "platform"))
    environment = {
        "python": python,
        "packages": packages,
        "lock": str(lock),
        "lock_sha256": runtime_shared.sha256_of(lock),
        "installer": None,
        "lock_differences": None,
    }
    found = {"found": "no accelerator (CPU only)", "python": "3", "version": {}, "packages": {}}
    [path] = runtime.run_program(settings, environment, found)
    seen = json.loads((work / "data" / "seen.json").read_text())
    assert seen["cwd"] == str(work / "project") and seen["argv"] == ["--epochs", "2"]
    assert seen["flavour"] == "notebook"  # the experiment's env
    assert (seen["ENVKIT_DATA_DIR"], seen["ENVKIT_RESULTS_DIR"]) == (str(work / "data"), str(work / "results"))
    assert (seen["ENVKIT_DEVICE"], seen["ENVKIT_EXPERIMENT"], seen["ENVKIT_TARGET"]) == ("cpu", "gpu-train", "colab-t4")
    assert seen["ENVKIT_METRICS_DIR"].startswith(str(work / "results" / "gpu-train-"))
    if packages == "lock":
        assert seen["prefix"] == str(work / "venv")
    record = json.loads(path.read_text())
    assert path.resolve().parent == work / "results"
    assert (record["run"]["experiment"], record["run"]["exit_status"], record["metrics"]) == (
        "gpu-train",
        0,
        {"loss": 0.25},
    )
    assert record["notebook"]["files"]["project/train.py"] == settings["files"]["program"]["project/train.py"]
    assert record["notebook"]["files"][provenance.FILE_NAME] == settings["files"]["helper"][provenance.FILE_NAME]
    # what a host run records: the device the program's Python used, reported by the wrapper's start-up module
    device = record["run"]["device"]
    assert (device["observed"], device["accelerator"], device["python_processes"], device["label"]) == (
        True,
        "cpu",
        1,
        "cpu",
    )
    if packages == "lock":
        # the lock it was installed from is CPU mode's, which the packages match: no warning
        assert record["run"]["warnings"] == [] and not (tmp_path / "leaked").exists()


@pytest.mark.parametrize("experiment", ["gpu-shell", "gpu-script"])
def test_a_program_that_is_not_python_finds_the_venvs_python_first(project, tmp_path, monkeypatch, experiment):
    work = tmp_path / "work"
    monkeypatch.chdir(tmp_path)
    settings = unpack(render(project, experiment), work, monkeypatch)
    assert settings["executable"] == ["project/run.sh"]  # ./run.sh runs as it is, once its mode is back
    monkeypatch.setenv(runtime_shared.CPU_MODE, str(tmp_path))
    venv.create(work / "venv", system_site_packages=True)
    environment = {
        "python": "venv/bin/python",
        "packages": "lock",
        "lock": "requirements.lock",
        "lock_sha256": "0" * 64,
    }
    environment |= {"installer": None, "lock_differences": None}
    runtime.run_program(settings, environment, {"found": "", "python": "3", "version": {}, "packages": {}})
    assert (work / "data" / "prefix").read_text().strip() == str(work / "venv")


def test_a_failed_command_stops_the_notebook_in_one_line_and_keeps_its_record(project, tmp_path, monkeypatch):
    work = tmp_path / "work"
    monkeypatch.chdir(tmp_path)
    settings = unpack(render(project), work, monkeypatch)
    monkeypatch.setenv(runtime_shared.CPU_MODE, str(tmp_path))
    monkeypatch.setenv("FAIL", "3")
    environment = {"python": sys.executable, "packages": "runtime", "lock_sha256": "0" * 64}
    environment |= {"installer": None, "lock_differences": None}
    with pytest.raises(
        runtime.NotebookStop, match=r"^python train.py --epochs 2 failed \(exit 3\): trained, loss 0.25$"
    ):
        runtime.run_program(settings, environment, {"found": "", "python": "3", "version": {}, "packages": {}})
    [path] = (work / "results").glob("*.json")
    assert json.loads(path.read_text())["run"]["exit_status"] == 3


def test_only_the_records_a_run_leaves_are_given_their_block_and_returned(project, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    monkeypatch.chdir(tmp_path)
    settings = unpack(render(project), work, monkeypatch)
    monkeypatch.setenv(runtime_shared.CPU_MODE, str(tmp_path))
    (tmp_path / "credentials.json").write_text('{"token": "s3cret"}\n')

    def run(argv, env, cwd):  # the run, as far as the results folder sees it: a record and two files that are not
        results = work / "results"
        (results / "record.json").write_text('{"recipe": "train", "metrics": {"loss": 0.25}}\n')
        os.mkfifo(results / "progress.json")
        (results / "token.json").symlink_to(tmp_path / "credentials.json")
        return 0, "done"

    monkeypatch.setattr(runtime, "stream", run)
    environment = {"python": sys.executable, "packages": "runtime", "lock_sha256": "0" * 64}
    environment |= {"installer": None, "lock_differences": None}
    found = {"found": "", "python": "3", "version": {}, "packages": {}}
    assert runtime.run_program(settings, environment, found) == [Path("results/record.json")]
    assert json.loads((work / "results" / "record.json").read_text())["notebook"]["experiment"] == "gpu-train"
    out = capsys.readouterr().out
    assert "left out results/progress.json: a FIFO, not a regular file\n" in out
    assert "left out results/token.json: a symbolic link, not followed\n" in out
    assert out.endswith("results: results/record.json\n")
    assert (work / "results" / "token.json").is_symlink()
    assert (tmp_path / "credentials.json").read_text() == '{"token": "s3cret"}\n'


def test_an_edited_project_file_is_one_line_naming_the_rerender(project, tmp_path, monkeypatch):
    work = tmp_path / "work"
    monkeypatch.chdir(tmp_path)
    settings = unpack(render(project), work, monkeypatch)
    (work / "project" / "helper.py").write_text("LOSS = 0.0\n")
    with pytest.raises(runtime.NotebookStop, match="^project/helper.py changed since this notebook was rendered"):
        runtime.check_files(settings, "program")


def test_kaggle_launch_dry_run_of_a_command_experiment(capsys, project, tmp_path, monkeypatch):
    monkeypatch.setenv("KAGGLE_USERNAME", "student")
    code, out, err = envkit(
        capsys,
        "launch",
        "tpu-train",
        "--on",
        "kaggle",
        "--dry-run",
        "--config",
        str(project / "envkit.yaml"),
        "--output",
        str(tmp_path / "jobs"),
    )
    assert code == 0, err
    assert '"machine_shape": "TpuV5E8"' in out and "tpu-train.ipynb (envkit notebook, " in out
    assert "kaggle kernels push -p " in out
    written = tmp_path / "jobs" / "envkit-tpu-train" / "tpu-train.ipynb"  # for a push by hand
    settings = settings_of(nbformat.read(written, as_version=4))
    assert (settings["program"], settings["platform"]) == (["python", "train.py"], "kaggle")


def test_colab_link_names_the_path_from_the_repositorys_top(capsys, tmp_path):
    """The config in a subfolder of its repository: the link named notebooks/... from the project's folder."""
    repository = tmp_path / "repository"
    project = copy_project(repository / "sub" / "dir")
    git(repository, "init", "-q", "-b", "main")
    git(repository, "add", "-A")
    git(repository, "commit", "-q", "-m", "project in a subfolder")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repository, capture_output=True, text=True, check=True)
    argv = ["notebook", "gpu-mnist", "--target", "colab-t4", "--colab-link", "--config", str(project / "envkit.yaml")]
    code, out, err = envkit(capsys, *argv)
    assert (code, err) == (0, "")
    assert out == (
        f"https://colab.research.google.com/github/envkit/envkit/blob/{head.stdout.strip()}/"
        "sub/dir/notebooks/colab-t4/gpu-mnist.ipynb\n"
    )


def test_a_tracked_secret_is_never_carried_unless_the_config_lists_it(project, capsys):
    key = "-----BEGIN " + "RSA PRIVATE KEY-----\nMIIEfake\n-----END RSA PRIVATE KEY-----\n"
    for name, text in {
        ".env": "SECRET_API_KEY=1\n",
        ".netrc": "machine x\n",
        "keys/id_rsa": key,
        "config.py": f"KEY = {key!r}\n",
    }.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    git(project, "add", "-f", ".env", ".netrc", "keys/id_rsa", "config.py")
    code, out, err = envkit(
        capsys,
        "notebook",
        "gpu-train",
        "--target",
        "colab-t4",
        "--config",
        str(project / "envkit.yaml"),
        "--output",
        str(project.parent / "nb.ipynb"),
    )
    notebook = nbformat.read(project.parent / "nb.ipynb", as_version=4)
    carried = settings_of(notebook)["files"]["program"]
    assert code == 0 and "project/train.py" in carried
    assert not {"project/.env", "project/.netrc", "project/keys/id_rsa", "project/config.py"} & set(carried)
    assert "SECRET_API_KEY" not in json.dumps(notebook) and err.count("\n") == 1
    assert "left out 4 file(s) that look like secrets" in err and "config.py (holds a private key)" in err
    # Listed, it is carried (and named no more).
    config = project / "envkit.yaml"
    config.write_text(config.read_text() + "include_secrets: [.env]\n")
    carried = settings_of(render(project))["files"]["program"]
    assert "project/.env" in carried and "project/.netrc" not in carried


PWN = 't{__import__("os").system("touch PWN")}.py'


def execute_program_cells(notebook: nbformat.NotebookNode, work: Path, monkeypatch) -> None:
    """The notebook's settings, archive, %%writefile and program-check cells, run by a real IPython kernel."""
    from nbclient import NotebookClient

    monkeypatch.setenv("ENVKIT_NOTEBOOK_WORK", str(work))
    kept = [cell for cell in notebook.cells if cell.id in ("settings", "files") or cell.source.startswith("%%")]
    kept.insert(2, nbformat.v4.new_code_cell("import envkit_notebook as nb"))
    kept += [cell for cell in notebook.cells if cell.id == "recipe-check"]
    run = nbformat.v4.new_notebook(cells=kept, metadata=notebook.metadata)
    NotebookClient(run, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("my train.py", "%%writefile 'project/my train.py'"),
        ("it's.py", '%%writefile "project/it\'s.py"'),
        ("both '\"quotes.py", None),
        (PWN, None),
        ("a$HOME.py", None),
        ("{x}.py", None),
    ],
)
def test_a_file_name_is_never_evaluated_and_names_with_spaces_work(project, tmp_path, monkeypatch, name, shown):
    (project / name).write_text(TRAIN)
    git(project, "add", name)
    config = project / "envkit.yaml"
    config.write_text(
        config.read_text().replace(
            'command: [python, train.py, --epochs, "2"]', f"command: [python, {json.dumps(name)}]"
        )
    )
    notebook = render(project)
    writes = [cell.source.split("\n", 1)[0] for cell in notebook.cells if cell.source.startswith("%%writefile")]
    assert writes == ([shown] if shown else [])  # an expanded name stays in the archive, checked like the rest
    assert f"project/{name}" in settings_of(notebook)["files"]["program"]
    work = tmp_path / "work"
    work.mkdir()
    execute_program_cells(notebook, work, monkeypatch)  # check_files: every program file is there, exactly
    assert (work / "project" / name).read_text() == TRAIN
    assert not list(tmp_path.rglob("PWN")) and not list(project.rglob("PWN"))


@pytest.mark.parametrize(
    "argv",
    [
        ["notebook", "gpu-train", "--target", "colab-t4", "--output", "nb.ipynb"],
        ["experiment", "gpu-train", "--dry-run"],
    ],
)
def test_a_script_not_yet_committed_is_refused_in_one_line_as_envkit_run_says(project, capsys, tmp_path, argv):
    (project / "new.py").write_text(TRAIN)
    config = project / "envkit.yaml"
    config.write_text(
        config.read_text().replace('command: [python, train.py, --epochs, "2"]', "command: [python, new.py]")
    )
    code, out, err = envkit(capsys, *argv, "--config", str(config))
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"envkit: error: new.py is not among the files git tracks in {project} less .dockerignore's")
    assert not (tmp_path / "nb.ipynb").exists() and not (project / "nb.ipynb").exists()


@pytest.mark.parametrize("kind", ["the user's notebook", "a symlink", "a dangling symlink"])
def test_a_file_of_the_users_where_the_notebook_goes_is_never_overwritten(capsys, project, tmp_path, monkeypatch, kind):
    """Before: `envkit notebook gpu-train` wrote over the user's own gpu-train.ipynb in the working directory (the
    default name) or through --output, and replaced a symlink there, though envkit never overwrites a file that
    lacks its mark; a notebook envkit wrote is written again."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    mine = work / "gpu-train.ipynb"
    (tmp_path / "elsewhere.ipynb").write_text("{}\n")
    if kind == "the user's notebook":
        mine.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n')
    else:
        mine.symlink_to(tmp_path / ("elsewhere.ipynb" if kind == "a symlink" else "gone.ipynb"))
    before = os.readlink(mine) if mine.is_symlink() else mine.read_text()
    config = ["--config", str(project / "envkit.yaml")]
    for output in ([], ["--output", str(mine)]):
        code, out, err = envkit(capsys, "notebook", "gpu-train", "--target", "colab-t4", *output, *config)
        assert (code, out) == (2, "") and err.count("\n") == 1, err
        assert err.startswith(f"envkit: error: {mine if output else 'gpu-train.ipynb'} is not a notebook envkit wrote")
    assert (os.readlink(mine) if mine.is_symlink() else mine.read_text()) == before
    assert (tmp_path / "elsewhere.ipynb").read_text() == "{}\n"
    mine.unlink()
    assert envkit(capsys, "notebook", "gpu-train", "--target", "colab-t4", *config)[0] == 0
    assert envkit(capsys, "notebook", "gpu-train", "--target", "colab-t4", *config)[0] == 0  # envkit's own, again


def test_a_notebook_is_never_written_outside_the_project_through_a_link(capsys, project, tmp_path):
    """Issue 39 §18: a folder of the project that links elsewhere took the notebook there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / "shared").symlink_to(elsewhere)
    output = project / "shared" / "gpu-train.ipynb"
    argv = ["notebook", "gpu-train", "--target", "colab-t4", "--output", str(output)]
    code, out, err = envkit(capsys, *argv, "--config", str(project / "envkit.yaml"))
    assert (code, out) == (2, "") and err == (
        f"envkit: error: {output} is in {project} but a symbolic link takes it to {elsewhere}/gpu-train.ipynb, "
        "outside it: envkit writes only inside the project; replace the link with a folder, or write elsewhere with "
        "--output DIR\n"
    )
    assert list(elsewhere.iterdir()) == []


# Put together here so that this file itself holds no token a scanner would flag.
HF_TOKEN = "hf" + "_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"


@pytest.mark.parametrize(
    ("where", "old", "new"),
    [
        ("env/HF_TOKEN", "env: {FLAVOUR: notebook}", f"env: {{FLAVOUR: notebook, HF_TOKEN: {HF_TOKEN}}}"),
        ("command/2", 'command: [python, train.py, --epochs, "2"]', f"command: [python, train.py, {HF_TOKEN}]"),
        ("args/1", "gpus: first\n", f"gpus: first\n    args: [--hf-token, {HF_TOKEN}]\n"),
        ("defaults/0", "gpus: first\n", f"gpus: first\n    defaults: ['--hf-token={HF_TOKEN}']\n"),
        ("summary", "summary: train.py on one GPU", f"summary: train.py with {HF_TOKEN}"),
    ],
)
def test_a_token_anywhere_in_the_experiment_never_reaches_a_notebook(capsys, project, tmp_path, where, old, new):
    """Before: a Hugging Face token in the experiment's args, defaults or summary was written 4 times into the
    notebook (its markdown, settings cell and archive's report/experiments.json) though envkit.yaml was left out
    of the archive for holding it; only env: and command were checked. One check of every string as envkit.yaml
    is loaded now stops it, naming the key path, writing nothing."""
    config = project / "envkit.yaml"
    text = config.read_text().replace(old, new, 1)
    config.write_text(text)
    output = tmp_path / "nb.ipynb"
    argv = ["notebook", "gpu-train", "--target", "colab-t4", "--output", str(output), "--config", str(config)]
    code, out, err = envkit(capsys, *argv)
    assert (code, out, output.exists()) == (2, "", False), err
    assert err.count("\n") == 1 and f"experiments/gpu-train/{where} holds a Hugging Face token" in err, err
    assert HF_TOKEN not in err
    config.write_text("include_secrets: [envkit.yaml]\n" + text)  # the one way in
    assert envkit(capsys, *argv)[0] == 0 and HF_TOKEN in output.read_text()
