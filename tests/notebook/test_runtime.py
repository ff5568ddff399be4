"""The code every notebook runs (envkit/notebook/runtime.py): its runtime check with every accelerator it must
recognise and refuse, its file check, and both as one line inside a real kernel (nbclient + ipykernel)."""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from notebook_cpu import build_wheelhouse, cpu_mode_env
from wheel_index import IndexServer

from envkit.notebook import builder, runtime, runtime_stream, runtime_venv
from envkit.notebook.runtime_shared import CPU_MODE
from envkit.project.notebook_platforms import load_platforms

# What nvidia-smi calls each GPU model the platforms offer.
GPU_NAMES = {
    "T4": "Tesla T4",
    "P100": "Tesla P100-PCIE-16GB",
    "L4": "NVIDIA L4",
    "A100": "NVIDIA A100-SXM4-40GB",
    "H100": "NVIDIA H100 80GB HBM3",
    "RTX PRO 6000": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
}
ACCELERATORS = [
    (platform.name, name) for platform in load_platforms().platforms.values() for name in platform.accelerators
]


def hardware(device: dict) -> tuple[list[tuple[str, str]], list[str]]:
    """(TPU chips as PCI (device id, subsystem id), GPU names) of a host with exactly ``device``."""
    if "tpu" in device:
        key = next(key for key, entry in load_platforms().tpu_chips.items() if entry["chip"] == device["tpu"])
        device_id, _, subsystem = key.partition(":")
        return [(device_id, subsystem or "0x00ab")] * device["chips"], []
    return [], [GPU_NAMES[device["gpu"]]] * device["count"]


def fake_host(root: Path, chips: list[tuple[str, str]], gpus: list[str]) -> tuple[Path, str]:
    """A sysfs PCI folder (a virtio NIC, Google's gVNIC, the TPU chips) and an nvidia-smi that lists ``gpus``."""
    pci = root / "pci"
    devices = [("0x1af4", "0x1041", "0x1041"), ("0x1ae0", "0x0042", "0x0058")] + [("0x1ae0", d, s) for d, s in chips]
    for index, (vendor, device, subsystem) in enumerate(devices):
        folder = pci / f"0000:00:{index:02x}.0"
        folder.mkdir(parents=True)
        for name, value in (("vendor", vendor), ("device", device), ("subsystem_device", subsystem)):
            (folder / name).write_text(value + "\n")
    smi = root / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "".join(f"echo '{name}'\n" for name in gpus))
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return pci, str(smi)


def settings(platform: str, accelerator: str) -> dict:
    found = load_platforms().platforms[platform]
    return builder.runtime_settings(found, found.accelerators[accelerator])


@pytest.fixture(autouse=True)
def not_cpu_mode(monkeypatch):
    monkeypatch.delenv(CPU_MODE, raising=False)


@pytest.mark.parametrize(("platform", "accelerator"), ACCELERATORS)
def test_recognises_its_accelerator_and_refuses_every_other(tmp_path, capsys, platform, accelerator):
    wanted = settings(platform, accelerator)
    pci, smi = fake_host(tmp_path / "own", *hardware(wanted["device"]))
    found = runtime.check_runtime(wanted, pci, smi)
    assert found["found"] != "no accelerator (CPU only)"
    assert (
        f"accelerator: {found['found']}, as {wanted['platform_title']}'s {wanted['label']} needs"
        in capsys.readouterr().out
    )
    others = {
        repr(entry.device): entry.device
        for p in load_platforms().platforms.values()
        for entry in p.accelerators.values()
        if not _fits(entry.device, wanted["device"])
    }
    for index, device in enumerate([None, *others.values()]):
        pci, smi = fake_host(tmp_path / f"other{index}", *(hardware(device) if device else ([], [])))
        with pytest.raises(runtime.NotebookStop) as refused:
            runtime.check_runtime(wanted, pci, smi)
        message = str(refused.value)
        assert "\n" not in message and message.startswith("this runtime has ")
        assert message.endswith(
            f"but this notebook runs on {wanted['platform_title']}'s {wanted['label']}: {wanted['select']}"
        )


def _fits(device: dict, wanted: dict) -> bool:
    """Hardware that satisfies ``wanted`` too (Kaggle's T4 is Colab's T4): not a refusal case."""
    if "tpu" in wanted:
        return device == wanted
    return device.get("gpu") == wanted["gpu"] and device["count"] >= wanted["count"]


def test_a_gpu_model_is_a_whole_word(tmp_path):
    pci, smi = fake_host(tmp_path, [], ["NVIDIA L40S"])
    with pytest.raises(
        runtime.NotebookStop,
        match=r"^this runtime has NVIDIA L40S ×1, but this notebook runs on Google "
        r"Colab's L4 GPU: Runtime > Change runtime type",
    ):
        runtime.check_runtime(settings("colab", "L4"), pci, smi)


def test_kaggle_says_where_its_accelerator_is_chosen(tmp_path):
    pci, smi = fake_host(tmp_path, *hardware({"tpu": "v3", "chips": 4}))
    with pytest.raises(runtime.NotebookStop) as refused:
        runtime.check_runtime(settings("kaggle", "TpuV5E8"), pci, smi)
    assert str(refused.value) == (
        "this runtime has TPU v3 ×4, but this notebook runs on Kaggle's TPU v5e-8: Settings > "
        "Accelerator > TPU v5e-8 in the notebook editor (kaggle kernels push: machine_shape "
        "TpuV5E8 in kernel-metadata.json)"
    )


def test_the_runtime_is_recorded_and_compared_with_envkits_data(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab_20260819-060000_RC00")
    pci, smi = fake_host(tmp_path, *hardware({"tpu": "v5e", "chips": 1}))
    found = runtime.check_runtime(settings("colab", "v5e-1"), pci, smi)
    assert found["version"] == {"COLAB_RELEASE_TAG": "release-colab_20260819-060000_RC00"}
    assert set(found["packages"]) == {"torch", "torch_xla", "libtpu"} and found["packages"]["torch_xla"] is None
    out = capsys.readouterr().out
    assert "runtime version: COLAB_RELEASE_TAG=release-colab_20260819-060000_RC00" in out
    # this kernel is not Colab's TPU runtime: the drift from envkit's data is said
    assert "torch_xla 2.9.0 -> none" in out and "the runtime changed" in out


def test_cpu_mode_records_but_does_not_check(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(CPU_MODE, str(tmp_path))
    pci, smi = fake_host(tmp_path / "host", [], [])
    assert runtime.check_runtime(settings("kaggle", "TpuV5E8"), pci, smi)["found"] == "no accelerator (CPU only)"
    assert "(CPU mode: Kaggle's TPU v5e-8 is not checked)" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["1", "yes"])
def test_cpu_mode_names_a_wheelhouse_not_a_switch(tmp_path, monkeypatch, value):
    """Issue 28 §22: ENVKIT_NOTEBOOK_CPU=1 said `1/requirements.lock is missing: run the cells above in order`."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(CPU_MODE, value)
    with pytest.raises(runtime.NotebookStop) as stopped:
        runtime.create_environment({"lock": {"path": "requirements.lock", "python": "3.11"}})
    assert str(stopped.value) == (
        f"{CPU_MODE}={value} is not a directory: it names CPU mode's wheelhouse (a CPU requirements.lock "
        "and its wheels), not a switch; unset it to run on the accelerator"
    )


def test_the_tests_cpu_mode_keeps_uvs_cache_beside_the_wheelhouse_not_in_the_users(tmp_path, monkeypatch):
    """Issue 44 §4: the runtime drops every UV_* variable before it calls uv, so the tests' UV_CACHE_DIR never
    reached it and each session left another unpacked torch in the user's cache (about 5 GB after a few runs)."""
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "requirements.lock").write_text("")  # no package: the venv alone, made by uv through its cache
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    for name, value in cpu_mode_env(wheelhouse, tmp_path / "work").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(runtime_venv.INSTALLER, "uv")
    monkeypatch.chdir(tmp_path)
    runtime.create_environment({"lock": {"path": "unused", "python": "unused"}})
    assert (tmp_path / "venv" / "bin" / "python").exists()
    assert not (tmp_path / "home").exists()
    assert (tmp_path / "wheelhouse-cache" / "uv").is_dir()  # beside the wheelhouse: it goes with the session's files


def test_the_tests_cpu_wheelhouse_takes_torchs_cpu_build_or_says_it_is_missing(tmp_path, monkeypatch):
    """Issue 44 §4: where pip's sources have only the default index's torch (its CUDA build), the wheelhouse of
    CPU mode downloaded it and its CUDA libraries (GBs); it asks for the CPU build and says it is not there."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no find-links folder of local wheels: the index alone
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    with IndexServer(tmp_path / "www") as server:
        index = server.index("pypi")
        index.add("torch", "2.13.0", "nvidia-cublas==13.0")
        index.add("nvidia-cublas", "13.0")
        for name, version in (("tqdm", "4.67.1"), ("numpy", "2.3.0")):
            index.add(name, version)
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        with pytest.raises(RuntimeError, match=r"pip cannot download torch==2\.13\.0\+cpu .*for the CPU wheelhouse"):
            build_wheelhouse(tmp_path / "wheelhouse")
    assert not list((tmp_path / "wheelhouse").glob("nvidia*"))


def test_an_edited_file_is_one_line_naming_the_rerender(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "mnist.py").write_text("print('edited')\n")
    files = {"recipes": {"recipes/mnist.py": "0" * 64}}
    with pytest.raises(runtime.NotebookStop) as stopped:
        runtime.check_files({"files": files, "rerender": "envkit notebook tpu-mnist --target kaggle-tpu"}, "recipes")
    assert str(stopped.value).startswith("recipes/mnist.py changed since this notebook was rendered (sha256 ")
    assert str(stopped.value).endswith(
        "rendered 000000000000): re-render the notebook with `envkit notebook tpu-mnist --target kaggle-tpu`"
    )


def test_lock_packages_reads_a_requirements_lock(repo_root):
    packages = runtime_venv.lock_packages(repo_root / "notebooks" / "colab-tpu" / "requirements.lock")
    assert packages["torch"] == "2.9.0" and packages["torch-xla"] == "2.9.0" and packages["libtpu"] == "0.0.21"


def test_without_uv_a_lock_for_another_python_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(runtime_venv.INSTALLER, "pip")
    (tmp_path / "requirements.lock").write_text("tqdm==4.67.1 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    with pytest.raises(
        runtime.NotebookStop,
        match=r"^the lock is for Python 3\.2 and this runtime has 3\.\d+: uv "
        r"provides that Python, but uv is not installed here",
    ):
        runtime.create_environment({"lock": {"path": "requirements.lock", "python": "3.2"}})


def fake_installs(monkeypatch) -> list[list[str]]:
    """The installer's commands, recorded: making the venv makes a venv's folders, the installs do nothing."""
    ran = []

    def stream(argv, env):
        ran.append(argv)
        if "venv" in argv[:3]:
            for folder in ("bin", "lib"):
                (runtime_venv.VENV / folder).mkdir(parents=True)
        return 0, ""

    monkeypatch.setattr(runtime_venv, "stream", stream)
    monkeypatch.setattr(runtime_venv, "_check_holds_the_lock", lambda python, packages: None)
    monkeypatch.setattr(runtime_venv, "_installer_version", lambda installer: installer)
    monkeypatch.setenv(runtime_venv.INSTALLER, "uv")
    return ran


def test_the_venv_a_run_made_is_marked_and_replaced_and_no_other_folder_is(tmp_path, monkeypatch):
    """Issue 39 §1 (every path envkit replaces): ./venv went with shutil.rmtree whatever it was, and
    ENVKIT_NOTEBOOK_WORK may name the user's own folder, whose venv/ holds their work."""
    from envkit.host.venv import VENV_ENTRIES
    from envkit.project import marks

    assert (runtime_venv.VENV_FILE, runtime_venv.VENV_MARK) == (marks.VENV_FILE, marks.VENV)
    assert runtime_venv.VENV_ENTRIES == VENV_ENTRIES
    monkeypatch.chdir(tmp_path)
    (tmp_path / "requirements.lock").write_text("tqdm==4.67.1 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    ran = fake_installs(monkeypatch)
    lock = {"lock": {"path": "requirements.lock", "python": "3.11"}}
    for _ in range(2):  # the second run replaces the first's venv
        runtime.create_environment(lock)
        assert sorted(p.name for p in (tmp_path / "venv").iterdir()) == ["bin", "envkit-venv.txt", "lib"]
    assert len(ran) == 4

    (tmp_path / "venv" / "train.py").write_text("mine")
    with pytest.raises(runtime.NotebookStop, match=r"/venv holds train\.py, which a venv does not: it is never"):
        runtime.create_environment(lock)
    (tmp_path / "venv" / "envkit-venv.txt").unlink()
    (tmp_path / "venv" / "train.py").unlink()
    with pytest.raises(runtime.NotebookStop, match=r"/venv is not a venv this notebook made \(it holds no envkit-"):
        runtime.create_environment(lock)
    assert sorted(p.name for p in (tmp_path / "venv").iterdir()) == ["bin", "lib"] and len(ran) == 4


# ---- inside a real kernel -----------------------------------------------------------


def committed_cells(repo_root: Path, notebook: str, ids: list[str]) -> nbformat.NotebookNode:
    """The committed notebook with only its cells ``ids``, in its order."""
    full = nbformat.read(repo_root / "notebooks" / notebook, as_version=4)
    full.cells = [cell for cell in full.cells if cell.id in ids]
    return full


def execute_until_stopped(notebook: nbformat.NotebookNode, work: Path, monkeypatch) -> list[str]:
    """Run it in a fresh ipykernel as "Run all" does; the error lines of the cell that stopped it."""
    monkeypatch.setenv("ENVKIT_NOTEBOOK_WORK", str(work))
    with pytest.raises(CellExecutionError):  # the cell fails, so "Run all" stops there
        NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    stopped = next(cell for cell in notebook.cells if any(o.output_type == "error" for o in cell.get("outputs", [])))
    assert stopped is notebook.cells[-1]
    return next(o for o in stopped.outputs if o.output_type == "error").traceback


def test_in_the_notebook_the_wrong_accelerator_is_one_line_with_the_fix(repo_root, tmp_path, monkeypatch):
    # This machine has no TPU: the committed Colab notebook's runtime check stops with the menu path.
    notebook = committed_cells(repo_root, "colab-tpu/tpu-mnist-single.ipynb", ["settings", "files", "runtime-check"])
    assert execute_until_stopped(notebook, tmp_path, monkeypatch) == [
        "envkit: this runtime has no accelerator (CPU only), but this notebook runs on Google Colab's v5e-1 TPU: "
        "Runtime > Change runtime type > Hardware accelerator: v5e-1 TPU, then Runtime > Run all"
    ]


def test_in_the_notebook_an_edited_recipe_cell_is_one_line(repo_root, tmp_path, monkeypatch):
    monkeypatch.setenv(CPU_MODE, str(tmp_path / "no-wheels"))  # the runtime check passes: only files matter
    notebook = committed_cells(
        repo_root,
        "kaggle-tpu/tpu-mnist.ipynb",
        ["settings", "files", "runtime-check", "file-recipes-mnist-py", "recipe-check"],
    )
    recipe = next(cell for cell in notebook.cells if cell.id == "file-recipes-mnist-py")
    recipe.source = recipe.source.replace("def ", "def  ", 1)
    [line] = execute_until_stopped(notebook, tmp_path / "work", monkeypatch)
    assert line.startswith("envkit: recipes/mnist.py changed since this notebook was rendered (sha256 ")
    assert line.endswith("re-render the notebook with `envkit notebook tpu-mnist --target kaggle-tpu`")


def test_a_run_returns_when_the_program_ends_not_when_a_child_it_left_running_does(tmp_path, capfd):
    """As the run wrapper in a terminal does (issue 33 §9): a child left running in the background (a `sleep 45 &`,
    a TensorBoard server) holds the output pipe, but the cell's run returns when the program ends; the child runs
    on, and what it writes later is still shown."""
    release = tmp_path / "release"
    os.mkfifo(release)
    script = f"(read line < {release}; echo late) & echo trained; exit 3"
    ended = []
    thread = threading.Thread(target=lambda: ended.append(runtime_stream.stream(["sh", "-c", script])), daemon=True)
    thread.start()
    thread.join(timeout=120)  # a hang guard: the background child waits for the release below
    try:
        assert ended == [(3, "trained")], "the run waited for the program's background child"
    finally:
        with open(open_for_the_reader(release), "w") as writer:  # the child may go now
            writer.write("go\n")
    for _ in range(1200):  # the child's late line, copied by the thread once the child writes it
        if "late" in capfd.readouterr().out:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the background child's output was not shown")


def open_for_the_reader(fifo: Path) -> int:
    """A FIFO opened to write once its reader has opened it: the program may end before its background child has
    been scheduled to open it, and a non-blocking open without a reader fails (ENXIO); a blocking one would hang the
    test if the child never came."""
    for _ in range(1200):
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno != errno.ENXIO:
                raise
        time.sleep(0.1)
    pytest.fail("the background child never opened its FIFO")


def left_behind(folder: Path, case: str) -> Path:
    """A results file a program may leave that is not a record to read whole: ``case`` says which."""
    path = folder / "results" / f"{case}.json"
    path.parent.mkdir()
    if case == "symlink":  # to a file the notebook's user would not publish
        (folder / "credentials.json").write_text('{"token": "s3cret"}\n')
        path.symlink_to(folder / "credentials.json")
    elif case == "fifo":
        os.mkfifo(path)
    elif case == "huge":  # past the 16 MiB the run wrapper and envkit's reader read (sparse: no disk)
        with path.open("wb") as handle:
            handle.truncate(17 * 2**20)
    elif case == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    else:
        path.write_text("[1, 2]\n")
    return path


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("symlink", "a symbolic link, not followed"),
        ("fifo", "a FIFO, not a regular file"),
        ("huge", "larger than 16 MiB, more than the wrapper reads"),
        ("deep", "nested deeper than 64 levels, more than a results file may be"),
        ("array", "an array, not a results record (a JSON object)"),
    ],
)
def test_a_results_file_is_read_with_bounds_and_never_through_a_link(tmp_path, capsys, monkeypatch, case, reason):
    monkeypatch.delenv(CPU_MODE, raising=False)
    path = left_behind(tmp_path, case)
    before = os.lstat(path)
    notebook = {"platform": "colab", "accelerator": "T4", "experiment": "gpu-train", "target": "colab-t4"}
    notebook["files"] = {"helper": {}, "lock": {}, "program": {}}
    environment = {"packages": "lock", "lock_sha256": "0" * 64, "installer": "uv", "lock_differences": None}
    found = {"found": "T4 ×1", "python": "3.12", "version": {}, "packages": {}}
    assert runtime.record(path, notebook, environment, found) is False
    assert capsys.readouterr().out == f"left out {path}: {reason}\n"
    after = os.lstat(path)  # left as it was: not replaced, not followed
    assert (after.st_ino, after.st_mode, after.st_mtime_ns) == (before.st_ino, before.st_mode, before.st_mtime_ns)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    if case == "symlink":
        assert (tmp_path / "credentials.json").read_text() == '{"token": "s3cret"}\n'
