"""`envkit notebook`: valid, deterministic notebooks that carry their lock and recipe, kept by render --check."""

from __future__ import annotations

import ast
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import nbformat
import pytest

from envkit.cli import main
from envkit.lock.lockfile import lock_path, read_lock
from envkit.notebook import builder, embedded
from envkit.notebook.runtime_shared import EXPERIMENTS
from envkit.project.experiments import load_experiments
from envkit.project.load import load_config
from envkit.project.output import Output
from envkit.support import provenance

COMMITTED = {  # target -> experiments, as envkit.yaml lists them
    "colab-tpu": ["tpu-mnist-single"],
    "colab-t4": ["gpu-mnist"],
    "kaggle-tpu": ["tpu-mnist", "e3-batch-scaling"],
}
SECTIONS = [
    "## 1. What it is",
    "## 2. Runtime check",
    "## 3. Environment",
    "## 4. The recipe",
    "## 5. The run",
    "## 6. The result",
]
# PEP 723's reference regular expression for an inline metadata block.
PEP_723 = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")


def envkit(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def config(repo_root):
    return load_config(repo_root / "envkit.yaml")


def committed_pairs():
    return [(target, experiment) for target, experiments in COMMITTED.items() for experiment in experiments]


def test_the_config_lists_the_committed_notebooks(config, repo_root):
    assert {name: list(t.notebooks) for name, t in config.targets.items() if t.is_notebook} == COMMITTED
    assert sorted(path.relative_to(repo_root) for path in (repo_root / "notebooks").glob("*/*.ipynb")) == sorted(
        builder.notebook_path(Output(), target, experiment) for target, experiment in committed_pairs()
    )


@pytest.mark.parametrize(("target", "experiment"), committed_pairs())
def test_committed_notebook_is_a_fresh_render_valid_and_deterministic(config, repo_root, target, experiment):
    first = builder.render_notebook(config, experiment, target, committed=True)
    assert builder.render_notebook(config, experiment, target, committed=True).text == first.text
    assert (repo_root / first.path).read_text(encoding="utf-8") == first.text
    notebook = nbformat.reads(first.text, as_version=4)
    nbformat.validate(notebook)
    assert (notebook.nbformat, notebook.nbformat_minor) == (4, 5)


def test_a_render_reads_the_lock_once_and_works_out_its_inputs_once(config, monkeypatch):

    from envkit.lock import lockfile, status
    from envkit.support import bounded_load

    lock, opened, inputs = lockfile.lock_path(config, "kaggle-tpu"), [], []
    real_open, real_inputs = bounded_load.open_regular, status.lock_inputs

    def counting_open(path):  # every read of a project file opens it here
        opened.extend([path] if Path(path) == lock else [])
        return real_open(path)

    def counting_inputs(target):
        inputs.append(target.name)
        return real_inputs(target)

    monkeypatch.setattr(bounded_load, "open_regular", counting_open)
    monkeypatch.setattr(status, "lock_inputs", counting_inputs)  # where lock_status looks it up
    monkeypatch.setattr(builder, "lock_inputs", counting_inputs, raising=False)  # where the builder imported it
    builder.render_notebook(config, "tpu-mnist", "kaggle-tpu")
    assert (len(opened), inputs) == (1, ["kaggle-tpu"])


@pytest.mark.parametrize(("target", "experiment"), committed_pairs())
def test_it_reads_top_to_bottom_and_carries_what_it_runs(config, repo_root, tmp_path, target, experiment):
    notebook = nbformat.reads(builder.render_notebook(config, experiment, target).text, as_version=4)
    markdown = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    assert [markdown.index(heading) for heading in SECTIONS] == sorted(markdown.index(heading) for heading in SECTIONS)
    lock = read_lock(lock_path(config, target))
    assert f"sha256 `{lock.sha256}`" in markdown
    settings = notebook.cells[[cell.id for cell in notebook.cells].index("settings")].source
    # every embedded file: the recipe's %%writefile cell or the archive, under the sha256 SETTINGS checks
    written = written_files(notebook)
    sources = {
        **embedded.helper_files(),
        **provenance.shipped(),
        "requirements.lock": lock_path(config, target),
    }
    recipes = repo_root / "recipes"
    sources.update({f"recipes/{p.relative_to(recipes).as_posix()}": p for p in embedded.recipe_files(recipes, "mnist")})
    sources.update({f"report/{name}": p for name, p in embedded.report_files(repo_root).items()})
    # the report's own table: the notebook's experiment alone, as envkit.yaml defines it
    (tmp_path / EXPERIMENTS).write_text(written.pop(f"report/{EXPERIMENTS}"))
    assert load_experiments(tmp_path / EXPERIMENTS) == {experiment: config.experiments[experiment]}
    assert set(written) == set(sources)
    for path, body in written.items():
        assert body == sources[path].read_text(encoding="utf-8")
        assert f"'{path}': '{hashlib.sha256(body.encode()).hexdigest()}'" in settings
    # the lock in the metadata too, and its packages as PEP 723 inline metadata
    meta = notebook.metadata.envkit
    assert (meta.lock.sha256, meta.lock.requirements) == (lock.sha256, lock_path(config, target).read_text())
    assert (meta.target, meta.experiment, meta.packages) == (target, experiment, "lock")
    block = PEP_723.search(notebook.cells[1].source)
    content = "".join(
        line[2:] if line.startswith("# ") else line[1:] for line in block["content"].splitlines(keepends=True)
    )
    script = tomllib.loads(content)
    assert script["dependencies"] == [f"{name}=={version}" for name, version in sorted(lock.packages.items())]
    assert script["requires-python"] == f"=={config.targets[target].python}.*"


def written_files(notebook: nbformat.NotebookNode) -> dict[str, str]:
    """path -> text of every file the notebook writes: its %%writefile cells and its archive."""
    written = {
        cell.source.split("\n", 1)[0].split()[1]: cell.source.split("\n", 1)[1]
        for cell in notebook.cells
        if cell.source.startswith("%%writefile ")
    }
    [archive_cell] = [cell for cell in notebook.cells if cell.id == "files"]
    namespace = {}
    exec(archive_cell.source.split("\nwith zipfile", 1)[0], namespace)  # up to its sha256 check
    with zipfile.ZipFile(io.BytesIO(namespace["data"])) as archive:
        packed = {name: archive.read(name).decode("utf-8") for name in archive.namelist()}
    assert not set(packed) & set(written)
    return {**written, **packed}


@pytest.mark.parametrize(("target", "experiment"), committed_pairs())
def test_a_student_sees_the_recipe_and_envkits_cells_are_collapsed(config, target, experiment):
    notebook = nbformat.reads(builder.render_notebook(config, experiment, target).text, as_version=4)
    ids = [cell.id for cell in notebook.cells]
    before_results = notebook.cells[: ids.index("result-md")]
    collapsed = [cell for cell in notebook.cells if cell.metadata.get("jupyter", {}).get("source_hidden")]
    visible = [cell.id for cell in before_results if cell not in collapsed]
    assert len(visible) <= 12 and "file-recipes-mnist-py" in visible, visible
    assert {cell.id for cell in collapsed} >= {"pep-723", "settings", "files"}
    for cell in collapsed:  # Colab shows a form cell by its title; Jupyter and Kaggle hide its source
        assert cell.metadata.cellView == "form" and cell.metadata.jupyter.source_hidden is True
        assert cell.source.startswith("# @title ")


def test_the_archive_cell_unpacks_its_files_and_refuses_an_edited_archive(config, tmp_path, monkeypatch):
    notebook = nbformat.reads(builder.render_notebook(config, "tpu-mnist", "kaggle-tpu").text, as_version=4)
    [cell] = [cell for cell in notebook.cells if cell.id == "files"]
    monkeypatch.chdir(tmp_path)
    exec(cell.source, {})  # standard library only: it runs before the helper exists
    cell_ast = ast.parse(next(cell for cell in notebook.cells if cell.id == "settings").source)
    settings = ast.literal_eval(next(node.value for node in cell_ast.body if isinstance(node, ast.Assign)))
    for group in ("helper", "lock", "report"):
        for path, sha256 in settings["files"][group].items():
            assert hashlib.sha256((tmp_path / path).read_bytes()).hexdigest() == sha256
    edited = cell.source.replace('ARCHIVE = """\n', 'ARCHIVE = """\nAAAA', 1)
    with pytest.raises(RuntimeError, match="archive changed since envkit rendered it: re-render the notebook with"):
        exec(edited, {})


def test_the_helper_imports_alone_from_what_the_archive_carries(config, tmp_path, monkeypatch):
    """The helper is several modules: each one it imports is in the archive, and it imports from there alone (a
    fresh interpreter in the unpacked folder, as the notebook's kernel imports envkit_notebook)."""
    notebook = nbformat.reads(builder.render_notebook(config, "tpu-mnist", "kaggle-tpu").text, as_version=4)
    [cell] = [cell for cell in notebook.cells if cell.id == "files"]
    monkeypatch.chdir(tmp_path)
    exec(cell.source, {})
    assert set(embedded.helper_files()) > {embedded.HELPER_NAME}
    assert set(embedded.helper_files()) <= {path.name for path in tmp_path.iterdir()}
    probe = (
        "import sys; sys.path.insert(0, '.'); import envkit_notebook as nb; [getattr(nb, step) for step in nb.__all__]; "
        "print(sorted(name for name in sys.modules if name.startswith('envkit')))"
    )
    done = subprocess.run([sys.executable, "-I", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "['envkit_notebook']\n"  # nothing of an installed envkit


def test_colab_notebooks_preselect_their_accelerator_and_link_to_colab(config):
    committed = builder.render_notebook(config, "tpu-mnist-single", "colab-tpu", committed=True)
    notebook = nbformat.reads(committed.text, as_version=4)
    assert notebook.metadata.accelerator == "TPU" and notebook.metadata.colab.gpuType == "V5E1"
    assert (
        "[Open in Colab](https://colab.research.google.com/github/envkit/envkit/blob/main/notebooks/"
        "colab-tpu/tpu-mnist-single.ipynb)"
    ) in notebook.cells[0].source
    assert "Runtime > Change runtime type > Hardware accelerator: v5e-1 TPU" in notebook.cells[0].source
    # Written anywhere else (envkit notebook, --output) it is in no repository: no link to where it is not.
    elsewhere = nbformat.reads(builder.render_notebook(config, "tpu-mnist-single", "colab-tpu").text, as_version=4)
    assert "Open in Colab" not in elsewhere.cells[0].source
    assert (
        elsewhere.cells[0].source.split("Rendered by envkit", 1)[1]
        == notebook.cells[0].source.split("Rendered by envkit", 1)[1]
    )


GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]


@pytest.fixture()
def checkout(tmp_path, repo_root):
    """A git repository of the project, its notebooks committed (one commit, tagged v1), and that commit."""
    root = tmp_path / "checkout"
    root.mkdir()
    for part in ("envkit.yaml", "templates", "recipes", "notebooks", "docker"):
        copy = shutil.copytree if (repo_root / part).is_dir() else shutil.copy
        copy(repo_root / part, root / part)
    subprocess.run([*GIT, "init", "-q", "-b", "main"], cwd=root, check=True)
    subprocess.run([*GIT, "add", "-A"], cwd=root, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", "project"], cwd=root, check=True)
    subprocess.run([*GIT, "tag", "v1"], cwd=root, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
    return root, head.stdout.strip()


@pytest.mark.parametrize("revision", [None, "HEAD", "main", "v1", "full commit"])
def test_colab_link_names_the_commit_that_holds_the_notebook(capsys, checkout, revision):
    root, commit = checkout
    given = [] if revision is None else ["--revision", commit if revision == "full commit" else revision]
    code, out, err = envkit(
        capsys,
        "notebook",
        "gpu-mnist",
        "--target",
        "colab-t4",
        "--colab-link",
        *given,
        "--config",
        str(root / "envkit.yaml"),
    )
    assert (code, out, err) == (
        0,
        f"https://colab.research.google.com/github/envkit/envkit/blob/{commit}/notebooks/colab-t4/gpu-mnist.ipynb\n",
        "",
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["gpu-mnist", "--target", "colab-t4", "--revision", ""], "--revision '': name a commit, branch or tag"),
        (
            ["gpu-mnist", "--target", "colab-t4", "--revision", "a b/../c?x=1#"],
            "--revision 'a b/../c?x=1#': not a commit of ",
        ),
        (["gpu-mnist", "--target", "colab-t4", "--revision", "nope"], "--revision nope: not a commit of "),
        (["gpu-mnist", "--target", "colab-t4", "--revision=--all"], "--revision --all: not a commit of "),
        (
            ["tpu-mnist-single", "--target", "colab-tpu", "--use-runtime"],
            "--colab-link links a committed notebook, which runs on the lock",
        ),
    ],
)
def test_colab_link_refuses_what_git_does_not_hold(capsys, checkout, argv, message):
    root, _ = checkout
    code, out, err = envkit(capsys, "notebook", *argv, "--colab-link", "--config", str(root / "envkit.yaml"))
    assert (code, out) == (2, "") and err.count("\n") == 1 and message in err, err


def test_colab_link_only_to_a_notebook_committed_at_the_revision(capsys, checkout):
    """It linked to notebooks that were never committed (gpu-dp-cifar on colab-t4)."""
    root, tagged = checkout
    committed = "notebooks/colab-tpu/tpu-mnist-single.ipynb"
    subprocess.run(["git", "rm", "-q", "--cached", committed], cwd=root, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", "not committed any more"], cwd=root, check=True)
    link = [
        "notebook",
        "tpu-mnist-single",
        "--target",
        "colab-tpu",
        "--colab-link",
        "--config",
        str(root / "envkit.yaml"),
    ]
    code, _, err = envkit(capsys, *link)  # still in the working tree, but not in HEAD
    assert code == 2 and f"{committed} is not committed at HEAD (" in err
    code, out, _ = envkit(capsys, *link, "--revision", "v1")
    assert code == 0 and out.endswith(f"/blob/{tagged}/{committed}\n")


def test_colab_link_is_for_colab(capsys, repo_root):
    code, _, err = envkit(
        capsys,
        "notebook",
        "tpu-mnist",
        "--target",
        "kaggle-tpu",
        "--colab-link",
        "--config",
        str(repo_root / "envkit.yaml"),
    )
    assert code == 2 and "runs on kaggle, not colab" in err


def test_use_runtime_variant_runs_on_the_runtimes_packages(config):
    notebook = nbformat.reads(
        builder.render_notebook(config, "tpu-mnist-single", "colab-tpu", "runtime").text, as_version=4
    )
    environment = next(cell for cell in notebook.cells if cell.id == "environment")
    assert environment.source.endswith("environment = nb.runtime_environment(SETTINGS)")
    assert notebook.metadata.envkit.packages == "runtime"
    assert "envkit notebook tpu-mnist-single --target colab-tpu --use-runtime" in notebook.cells[0].source


@pytest.fixture()
def project(tmp_path, repo_root):
    (tmp_path / "project").mkdir()
    for part in ("envkit.yaml", "templates", "recipes", "notebooks", "docker"):
        copy = shutil.copytree if (repo_root / part).is_dir() else shutil.copy
        copy(repo_root / part, tmp_path / "project" / part)
    return tmp_path / "project"


def test_an_ad_hoc_notebook_goes_to_the_working_directory_never_into_renders_notebooks(
    capsys, project, tmp_path, monkeypatch
):
    """README's own `envkit notebook tpu-mnist-single --target colab-tpu --use-runtime` wrote into
    notebooks/colab-tpu/, which `render --all --check` then called stale for ever."""
    config = str(project / "envkit.yaml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for argv, written in (
        (["tpu-mnist-single", "--target", "colab-tpu", "--use-runtime"], "tpu-mnist-single-runtime.ipynb"),
        (["gpu-mnist", "--target", "colab-t4"], "gpu-mnist.ipynb"),
        (["gpu-mnist", "--target", "colab-t4", "--output", "out/nb.ipynb"], "out/nb.ipynb"),
    ):
        code, out, _ = envkit(capsys, "notebook", *argv, "--config", config)
        assert code == 0 and out.startswith(f"wrote {written} (") and (elsewhere / written).is_file()
    monkeypatch.chdir(project / "notebooks" / "colab-t4")
    for argv in (["tpu-mnist", "--target", "kaggle-tpu"], ["gpu-mnist", "--target", "colab-t4", "--output", "x.ipynb"]):
        code, out, err = envkit(capsys, "notebook", *argv, "--config", config)
        assert (code, out) == (2, "") and "notebooks/ is render's, for the targets' notebooks lists" in err
    assert envkit(capsys, "render", "--all", "--check", "--config", config)[0] == 0


def test_render_removes_the_notebooks_it_rendered_and_keeps_the_lock_it_did_not(capsys, project):
    """render --all deleted a removed notebook target's lock (`envkit lock` wrote it) and kept the notebooks it
    had rendered itself, so `render --all --check` failed for ever."""
    config = project / "envkit.yaml"
    text = config.read_text()
    config.write_text(text.replace("notebooks: [tpu-mnist, e3-batch-scaling]", "notebooks: [tpu-mnist]"))
    (project / "notebooks" / "kaggle-tpu" / "mine.ipynb").write_text('{"cells": []}\n')  # someone else's
    code, out, err = envkit(capsys, "render", "--all", "--check", "--config", str(config))
    assert code == 1 and "e3-batch-scaling.ipynb: no notebook target lists it: `envkit render --all` removes it" in out
    assert "mine.ipynb" not in out
    text, start, end = config.read_text(), "  colab-t4:\n", "  kaggle-tpu:\n"
    config.write_text(text[: text.index(start)] + text[text.index(end) :])  # the colab-t4 target removed
    code, out, _ = envkit(capsys, "render", "--all", "--config", str(config))
    assert code == 0 and f"; removed {project / 'notebooks' / 'colab-t4' / 'gpu-mnist.ipynb'} (" in out
    assert sorted(path.name for path in (project / "notebooks" / "colab-t4").iterdir()) == ["requirements.lock"]
    assert sorted(path.name for path in (project / "notebooks" / "kaggle-tpu").iterdir()) == [
        "mine.ipynb",
        "requirements.lock",
        "tpu-mnist.ipynb",
    ]
    assert envkit(capsys, "render", "--all", "--check", "--config", str(config))[0] == 0


def test_render_check_finds_an_edited_recipe_and_render_fixes_it(capsys, project, tmp_path, monkeypatch):
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    config = str(project / "envkit.yaml")
    assert envkit(capsys, "render", "--all", "--check", "--config", config)[0] == 0  # remembered (envkit.render.memo)
    with open(project / "recipes" / "ddp.py", "a", encoding="utf-8") as recipe:
        recipe.write("# an edit\n")
    code, out, err = envkit(capsys, "render", "--all", "--check", "--config", config)
    assert code == 1 and err.count("\n") == 1 and "rendered files are stale (colab-tpu, colab-t4, kaggle-tpu)" in err
    # ddp.py is part of every MNIST notebook (tpu_backend imports it)
    assert all(f"notebooks/{target}/{exp}.ipynb: stale (" in out for target, exp in committed_pairs())
    code, out, _ = envkit(capsys, "render", "--all", "--config", config)
    assert code == 0 and "rendered 4 notebooks for colab-tpu, colab-t4, kaggle-tpu" in out and "(4 changed)" in out
    assert envkit(capsys, "render", "--all", "--check", "--config", config)[0] == 0


def test_render_check_finds_a_notebook_no_target_lists(capsys, project):
    # the notebook of an experiment since taken off the list: its mark names it and its target
    text = (project / "notebooks" / "colab-t4" / "gpu-mnist.ipynb").read_text()
    (project / "notebooks" / "colab-t4" / "old.ipynb").write_text(
        text.replace("`gpu-mnist` and target", "`old` and target")
    )
    code, out, err = envkit(capsys, "render", "--all", "--check", "--config", str(project / "envkit.yaml"))
    assert code == 1 and "colab-t4/old.ipynb: no notebook target lists it: `envkit render --all` removes it" in out
    assert "rendered files are stale (1 unlisted notebook(s))" in err


def test_render_never_removes_a_notebook_in_a_folder_that_links_elsewhere(capsys, project, tmp_path):
    """Issue 39 §1 (every path envkit removes): a link named old in the notebooks folder, to a folder elsewhere
    holding a notebook render once wrote for target old: render --all removed it there, outside the project."""
    text = (project / "notebooks" / "colab-t4" / "gpu-mnist.ipynb").read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "gpu-mnist.ipynb").write_text(text.replace("and target `colab-t4`", "and target `old`"))
    (project / "notebooks" / "old").symlink_to(elsewhere)
    code, out, _ = envkit(capsys, "render", "--all", "--config", str(project / "envkit.yaml"))
    assert code == 0 and "removed" not in out and (elsewhere / "gpu-mnist.ipynb").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["tpu-mnist", "--target", "tpu-vm"],
            "target 'tpu-vm' is not a notebook target (it names no platform); notebook targets in",
        ),
        (
            ["gpu-mnist", "--target", "colab-tpu"],
            "experiment gpu-mnist runs on cuda, target colab-tpu is tpu-vm; its "
            "experiments: tpu-mnist, tpu-mnist-single",
        ),
        (["nope", "--target", "colab-tpu"], "unknown experiment 'nope'"),
        (
            ["gpu-ddp-cifar", "--target", "colab-t4"],
            "experiment gpu-ddp-cifar needs 4 GPUs (E2, DDP×4), and target colab-t4's colab T4 has 1; accelerators "
            "with enough: none on colab or kaggle",
        ),
        (["gpu-dp-cifar", "--target", "colab-t4", "--colab-link"], "experiment gpu-dp-cifar needs 4 GPUs (E2, DP×4)"),
        (
            ["e3-batch-scaling", "--target", "colab-tpu"],
            "experiment e3-batch-scaling needs 8 TPU cores (E3, 8-core TPU), and target colab-tpu's colab v5e-1 has 1; "
            "accelerators with enough: kaggle TpuV38 (8), kaggle TpuV5E8 (8), kaggle TpuV6E8 (8)",
        ),
        (["tpu-mnist", "--target", "colab-tpu", "--use-runtime"], "experiment tpu-mnist needs 8 TPU cores (E1,"),
        (
            ["tpu-mnist", "--target", "colab-tpu", "--output", "x.json"],
            "--output x.json: a notebook file ends in .ipynb",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(capsys, project, argv, message):
    before = sorted(project.rglob("*"))
    code, out, err = envkit(capsys, "notebook", *argv, "--config", str(project / "envkit.yaml"))
    assert (code, out) == (2, "") and err.count("\n") == 1 and message in err, err
    assert sorted(project.rglob("*")) == before


def test_an_unlocked_or_stale_notebook_target_is_refused(capsys, project):
    config = project / "envkit.yaml"
    config.write_text(
        config.read_text().replace(
            "  kaggle-tpu:\n    platform: kaggle\n",
            '  kaggle-tpu:\n    platform: kaggle\n    pip_packages: ["numpy==2.1.3"]\n',
        )
    )
    code, _, err = envkit(capsys, "notebook", "tpu-mnist", "--target", "kaggle-tpu", "--config", str(config))
    assert (
        code == 2
        and (
            "a notebook of target kaggle-tpu needs a fresh lock: kaggle-tpu: stale: "
            "notebooks/kaggle-tpu/requirements.lock: its inputs changed"
        )
        in err
    )
    (project / "notebooks" / "kaggle-tpu" / "requirements.lock").unlink()
    code, _, err = envkit(capsys, "notebook", "tpu-mnist", "--target", "kaggle-tpu", "--config", str(config))
    assert code == 2 and "kaggle-tpu: unlocked: notebooks/kaggle-tpu/requirements.lock does not exist" in err


def test_notebook_targets_have_no_image(capsys, repo_root):
    code, _, err = envkit(capsys, "build", "colab-tpu", "--config", str(repo_root / "envkit.yaml"))
    assert code == 2 and "target colab-tpu is a notebook target (colab v5e-1): it has no image" in err


def test_results_schema_describes_the_notebook_block(repo_root):
    schema = json.loads((repo_root / "envkit" / "data" / "results.schema.json").read_text())
    assert "notebook" not in schema["required"]
    block = schema["properties"]["notebook"]
    assert {"platform", "accelerator", "packages", "runtime", "lock_differences"} <= set(block["required"])


def test_a_recipe_brings_the_modules_and_packages_it_imports(tmp_path):
    recipes = tmp_path / "recipes"
    (recipes / "harness" / "parts").mkdir(parents=True)
    files = {
        "mnist.py": "import torch\nimport harness\nfrom tpu_backend import choose\n",
        "tpu_backend.py": "def choose():\n    import ddp\n",
        "ddp.py": "import os\n",
        "cifar.py": "import scatter\n",  # not imported by mnist: stays out
        "scatter.py": "",
        "harness/__init__.py": "from .run import Run\nfrom . import parts\n",
        "harness/run.py": "from .parts.timer import Timer\n",
        "harness/unused.py": "",
        "harness/parts/__init__.py": "",
        "harness/parts/timer.py": "from ..run import Run\n",
    }
    for name, text in files.items():
        (recipes / name).write_text(text)
    found = [path.relative_to(recipes).as_posix() for path in embedded.recipe_files(recipes, "mnist")]
    assert found == [
        "mnist.py",
        "ddp.py",
        "harness/__init__.py",
        "harness/parts/__init__.py",
        "harness/parts/timer.py",
        "harness/run.py",
        "tpu_backend.py",
    ]


def test_ci_executes_the_notebooks(repo_root):
    # tests/integration/test_notebook_execute.py skips without its wheelhouse, except where this is set
    assert "ENVKIT_REQUIRE_NOTEBOOK=1" in (repo_root / ".ci" / "run").read_text()


def test_e3_on_kaggle_runs_its_four_runs_in_turn(config):
    from envkit.project.experiments import experiment

    notebook = nbformat.reads(builder.render_notebook(config, "e3-batch-scaling", "kaggle-tpu").text, as_version=4)
    runs = experiment("e3-batch-scaling").runs
    assert len(runs) == 4
    intro = notebook.cells[0].source
    assert intro.count("`python recipes/mnist.py --device tpu --cores all --strategy spmd") == 4
    cell = ast.parse(next(cell for cell in notebook.cells if cell.id == "settings").source)
    settings = ast.literal_eval(next(node.value for node in cell.body if isinstance(node, ast.Assign)))
    assert [run["args"] for run in settings["runs"]] == [list(run.argv) for run in runs]
    assert all(
        run["cpu_args"][-12:-10] == ["--device", "cpu"] and "--run-name" in run["cpu_args"] for run in settings["runs"]
    )
    assert notebook.metadata.envkit.runs == [run.summary for run in runs]
