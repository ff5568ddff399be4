"""recipes/harness/, the package every recipe shares."""

from __future__ import annotations

import io
import json
import os
import random
import sys
import time
from importlib import metadata
from pathlib import Path

import harness
import pytest
import torch
from results_contract import results_schema


def test_fail_prints_one_line_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exited:
        harness.errors.fail("demo.py", "bad value\n  on two lines")
    assert exited.value.code == 2
    assert capsys.readouterr().err == "demo.py: error: bad value on two lines\n"


def test_parser_errors_are_one_line(capsys):
    parser = harness.RecipeArgumentParser(prog="demo.py")
    harness.add_common_arguments(parser, default_epochs=3)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--epochs", "zero"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "demo.py: error: argument --epochs: expected a positive integer, got 'zero' (see 'demo.py --help')\n"
    )


def test_common_arguments_defaults():
    parser = harness.RecipeArgumentParser(prog="demo.py")
    harness.add_common_arguments(parser, default_epochs=3)
    args = parser.parse_args([])
    assert (args.device, args.dataset, args.epochs, args.results_dir, args.resume, args.quiet) == (
        "cpu",
        "real",
        3,
        Path("results"),
        False,
        False,
    )


def test_the_run_variables_are_the_defaults_and_the_flags_still_win(monkeypatch, capsys):
    """Before: run.sh, the engines and the notebooks put --data-dir, --results-dir and --device on the command;
    now they set ENVKIT_DATA_DIR, ENVKIT_RESULTS_DIR and ENVKIT_DEVICE, and the recipes' flags override them."""
    monkeypatch.setenv("ENVKIT_DATA_DIR", "/workspace/data")
    monkeypatch.setenv("ENVKIT_RESULTS_DIR", "/workspace/results")
    monkeypatch.setenv("ENVKIT_DEVICE", "cuda")

    def parsed(*argv: str):
        parser = harness.RecipeArgumentParser(prog="demo.py")
        harness.add_common_arguments(parser, default_epochs=3)
        args = parser.parse_args(argv)
        return args.data_dir, args.results_dir, args.device

    assert parsed() == (Path("/workspace/data"), Path("/workspace/results"), "cuda")
    assert parsed("--device", "cpu", "--results-dir", "r") == (Path("/workspace/data"), Path("r"), "cpu")
    monkeypatch.setenv("ENVKIT_DEVICE", "gpu")
    with pytest.raises(SystemExit) as exited:
        parsed()
    assert exited.value.code == 2
    assert (
        capsys.readouterr().err == "demo.py: error: ENVKIT_DEVICE='gpu' is not a device; give one of cpu, cuda, tpu\n"
    )


def test_run_recipe_turns_recipe_errors_into_exit_2(capsys):
    def main():
        raise harness.RecipeError("what was wrong; what is allowed")

    with pytest.raises(SystemExit) as exited:
        harness.run_recipe("demo.py", main)
    assert exited.value.code == 2
    assert capsys.readouterr().err == "demo.py: error: what was wrong; what is allowed\n"


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "x"])
def test_positive_int_rejects(text):
    with pytest.raises(Exception, match="expected a positive integer"):
        harness.positive_int(text)


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "x"])
def test_positive_float_rejects(text):
    with pytest.raises(Exception, match="expected a positive number"):
        harness.positive_float(text)


@pytest.mark.parametrize("name", ["", "../up", "a/b", ".hidden", "sp ace"])
def test_run_names_that_are_not_file_names_are_refused(name):
    with pytest.raises(harness.RecipeError, match="is not allowed"):
        harness.arguments.check_run_name(name)


def test_summarize_is_mean_population_std_and_count():
    assert harness.records.summarize([1.0, 2.0, 3.0]) == {"mean": 2.0, "std": pytest.approx((2 / 3) ** 0.5), "n": 3}
    assert harness.records.summarize([5.0]) == {"mean": 5.0, "std": 0.0, "n": 1}
    assert harness.records.summarize([]) == {"mean": 0.0, "std": 0.0, "n": 0}


def test_timer_laps_add_up_to_elapsed_time():
    # Bounds read on the same clock, not a tolerance, so that a test preempted between two reads (CI runs beside
    # other suites) still passes: the laps' sum lies between the clock just after the timer was made and before
    # its last lap, and just before it was made and after its last lap.
    before = time.perf_counter()
    timer = harness.progress.DeviceTimer(torch.device("cpu"))
    made = time.perf_counter()
    laps = []
    for _ in range(3):
        time.sleep(0.01)
        asked = time.perf_counter()
        laps.append(timer.lap())
        answered = time.perf_counter()
    assert all(lap >= 0.01 for lap in laps)
    assert asked - made <= sum(laps) <= answered - before


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is visible here")
def test_cuda_device_without_gpu_is_a_recipe_error():
    with pytest.raises(harness.RecipeError, match="--device cuda: no CUDA GPU is visible"):
        harness.select_device("cuda")


@pytest.mark.parametrize(
    ("package", "expected"),
    [
        (None, "--device tpu needs torch_xla, which is not installed here"),
        # What the tpu-vm image showed on a distro python3 base without libpython3.11.
        (
            'raise ImportError("libpython3.11.so.1.0: cannot open shared object file:\\n No such file")',
            "--device tpu: torch_xla is installed but does not import (libpython3.11.so.1.0: cannot open shared object file: No such file)",
        ),
        (
            "import absl_is_not_here",
            "--device tpu: torch_xla is installed but does not import (No module named 'absl_is_not_here')",
        ),
    ],
)
def test_torch_xla_that_does_not_import_says_why(tmp_path, monkeypatch, package, expected):
    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)
    if package is None:
        monkeypatch.setitem(sys.modules, "torch_xla", None)  # import fails as where it is not installed
    else:
        (tmp_path / "torch_xla").mkdir()
        (tmp_path / "torch_xla" / "__init__.py").write_text(package + "\n")
        monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(harness.RecipeError) as raised:
        harness.import_torch_xla()
    assert str(raised.value).startswith(expected) and "\n" not in str(raised.value)


def test_fake_split_is_deterministic_and_class_conditional():
    images, labels = harness.fake_split(200, (3, 4, 4), 5, template_seed=1, sample_seed=2, noise=0.5)
    again = harness.fake_split(200, (3, 4, 4), 5, template_seed=1, sample_seed=2, noise=0.5)
    assert torch.equal(images, again[0]) and torch.equal(labels, again[1])
    assert images.shape == (200, 3, 4, 4) and labels.dtype == torch.int64
    test_images, test_labels = harness.fake_split(50, (3, 4, 4), 5, template_seed=1, sample_seed=3, noise=0.5)
    # The nearest class mean of the train split classifies the test split: same templates.
    means = torch.stack([images[labels == c].mean(0) for c in range(5)])
    nearest = ((test_images[:, None] - means[None]) ** 2).flatten(2).sum(-1).argmin(1)
    assert (nearest == test_labels).float().mean() > 0.9


def test_train_loader_shards_partition_each_epoch_and_reshuffle():
    data = harness.IndexBatchDataset(torch.arange(20).float(), torch.arange(20))
    shards = [harness.batch_loader(data, 4, train=True, seed=7, rank=rank, world_size=2) for rank in range(2)]
    seen = {}
    for epoch in (0, 1):
        for loader in shards:
            harness.set_loader_epoch(loader, epoch)
        seen[epoch] = [[int(i) for _, labels in loader for i in labels] for loader in shards]
        assert sorted(seen[epoch][0] + seen[epoch][1]) == list(range(20))
        assert [len(images) for images, _ in shards[0]] == [4, 4, 2]  # pre-collated batches of a 10-item shard
    assert seen[0] != seen[1]
    again = harness.batch_loader(data, 4, train=True, seed=7, rank=0, world_size=2)
    harness.set_loader_epoch(again, 1)
    assert [int(i) for _, labels in again for i in labels] == seen[1][0]


def test_index_batch_dataset_gathers_a_whole_batch_on_its_device():
    data = harness.IndexBatchDataset(torch.arange(10).float() * 2, torch.arange(10)).to(torch.device("cpu"))
    images, labels = data[[3, 1]]
    assert images.tolist() == [6.0, 2.0] and labels.tolist() == [3, 1]
    with pytest.raises(ValueError):
        harness.IndexBatchDataset(torch.zeros(2), torch.zeros(3))


def test_drop_last_drops_only_a_short_training_batch():
    data = harness.IndexBatchDataset(torch.zeros(10), torch.arange(10))
    assert [len(y) for _, y in harness.batch_loader(data, 4, train=True, seed=0, drop_last=True)] == [4, 4]
    assert [len(y) for _, y in harness.batch_loader(data, 4, train=False, seed=0, drop_last=True)] == [4, 4, 2]


def test_eval_shards_count_every_example_once():
    data = harness.IndexBatchDataset(torch.zeros(11), torch.arange(11))
    labels = [
        int(i)
        for rank in range(3)
        for _, y in harness.batch_loader(data, 2, train=False, seed=0, rank=rank, world_size=3)
        for i in y
    ]
    assert sorted(labels) == list(range(11))


def test_write_results_is_deterministic_and_never_overwrites(tmp_path):
    results = harness.records.build_results(
        recipe="demo",
        run_name="cpu",
        started_at="2026-01-01T00:00:00+00:00",
        settings={"b": 1, "a": 2},
        configuration={},
        timing={},
        metrics={"test_accuracy": 0.5},
        series={},
        environment={},
    )
    first = harness.records.write_results(tmp_path, dict(results))
    second = harness.records.write_results(tmp_path, dict(results))
    assert (first.name, second.name) == ("demo-cpu.json", "demo-cpu-2.json")
    assert json.loads(second.read_text())["run_name"] == "cpu-2"
    assert first.read_bytes() == harness.files.json_bytes(results)
    assert first.read_text().index('"a"') < first.read_text().index('"b"')  # sorted keys
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo-cpu-2.json", "demo-cpu.json"]  # no temp files left


def test_results_must_be_json_numbers(tmp_path):
    results = harness.records.build_results(
        recipe="demo",
        run_name="x",
        started_at="",
        settings={},
        configuration={},
        timing={},
        metrics={"final_loss": float("nan")},
        series={},
        environment={},
    )
    with pytest.raises(ValueError):
        harness.records.write_results(tmp_path, results)
    assert list(tmp_path.iterdir()) == []


def test_checkpoint_round_trip_restores_rng_and_tensors(tmp_path):
    random.seed(1)
    torch.manual_seed(1)
    model = torch.nn.Linear(3, 2)
    path = tmp_path / "ckpt" / "demo-cpu.pt"
    harness.checkpoints.save_checkpoint(
        path, {"epoch": 2, "model": model.state_dict(), "rng": harness.checkpoints.rng_states()}
    )
    expected = (random.random(), torch.rand(3))
    state = harness.checkpoints.load_checkpoint(path)
    harness.checkpoints.restore_rng_states(state["rng"])
    assert (random.random(), torch.rand(3))[0] == expected[0]
    harness.checkpoints.restore_rng_states(state["rng"])
    random.random()
    assert torch.equal(torch.rand(3), expected[1])
    assert torch.equal(state["model"]["weight"], model.weight.detach())
    assert [p.name for p in path.parent.iterdir()] == ["demo-cpu.pt"]


def test_a_failed_checkpoint_write_keeps_the_previous_one(tmp_path, monkeypatch):
    path = tmp_path / "demo.pt"
    harness.checkpoints.save_checkpoint(path, {"epoch": 1})
    monkeypatch.setattr(
        torch, "save", lambda obj, file: (file.write(b"half"), (_ for _ in ()).throw(OSError("disk full")))
    )
    with pytest.raises(OSError):
        harness.checkpoints.save_checkpoint(path, {"epoch": 2})
    assert harness.checkpoints.load_checkpoint(path)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["demo.pt"]


@pytest.mark.parametrize("content", [b"", b"not a checkpoint", b"PK\x03\x04 truncated zip"])
def test_corrupt_checkpoint_is_a_recipe_error(tmp_path, content):
    path = tmp_path / "bad.pt"
    path.write_bytes(content)
    with pytest.raises(harness.RecipeError, match="is corrupt or unreadable"):
        harness.checkpoints.load_checkpoint(path)


def test_checkpoint_of_something_else_is_refused(tmp_path):
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(harness.RecipeError, match="is not an envkit recipe checkpoint"):
        harness.checkpoints.load_checkpoint(tmp_path / "other.pt")


def test_check_resumable_names_the_differences(tmp_path):
    harness.checkpoints.check_resumable(tmp_path, {"lr": 1.0}, {"lr": 1.0})
    with pytest.raises(harness.RecipeError, match="lr: 1.0 in the checkpoint, 2.0 now"):
        harness.checkpoints.check_resumable(tmp_path, {"lr": 1.0}, {"lr": 2.0})


def test_a_recipe_the_wrapper_adopts_leaves_every_fact_of_the_wrapper_s_to_it(tmp_path, monkeypatch):
    """One owner per fact (issue 41 §3): the run wrapper (envkit/support/provenance_facts.py) writes the device the
    run used, the CPU's model, torch's versions, host, Python, image, lock, git and distributions; the harness of a
    run it adopts writes only what it alone counts or builds. The recipes never import envkit: compared here."""
    from envkit.support import provenance_facts

    monkeypatch.setenv("ENVKIT_RUN_ID", "ab" * 16)
    monkeypatch.setenv("ENVKIT_RESULTS_DIR", str(tmp_path))
    environment = harness.records.capture_environment(torch.device("cpu"), "cpu", tmp_path)
    assert set(environment) == {"device_count", "torchvision", "torch_cuda_build"}
    assert set(environment).isdisjoint(provenance_facts.environment())
    assert environment["device_count"] == os.cpu_count()


def test_a_recipe_run_without_the_wrapper_names_the_device_and_torch_but_no_cpu_model(tmp_path, monkeypatch):
    """python recipes/mnist.py: no wrapper adopts the record, which still has the keys the schema requires; the
    CPU's model is the wrapper's to look up (one look-up: envkit/support/provenance_facts.py's device_name)."""
    monkeypatch.delenv("ENVKIT_RUN_ID", raising=False)
    monkeypatch.setenv("ENVKIT_IMAGE", "envkit-cpu:abc")
    environment = harness.records.capture_environment(torch.device("cpu"), "cpu", tmp_path)
    assert environment == {
        "device_type": "cpu",
        "device_name": None,
        "device_count": os.cpu_count(),
        "torch": metadata.version("torch"),  # the wrapper's rule: the distribution's, not torch.__version__
        "torchvision": environment["torchvision"],
        "torch_xla": None,  # not installed here
        "torch_cuda_build": torch.version.cuda,
    }
    # run by a wrapper that watches another results folder: not adopted, so a record whole on its own
    monkeypatch.setenv("ENVKIT_RUN_ID", "ab" * 16)
    monkeypatch.setenv("ENVKIT_RESULTS_DIR", str(tmp_path / "elsewhere"))
    assert harness.records.capture_environment(torch.device("cpu"), "cpu", tmp_path) == environment


def test_the_record_carries_the_run_id_the_wrapper_gave(monkeypatch):
    """The wrapper adopts only the records that name its run (two runs may share a results folder)."""
    fields = dict.fromkeys(
        ("recipe", "run_name", "started_at", "settings", "configuration", "timing", "metrics", "series")
    )
    monkeypatch.setenv("ENVKIT_RUN_ID", "ab" * 16)
    assert harness.records.build_results(**fields, environment={})["run_id"] == "ab" * 16
    monkeypatch.delenv("ENVKIT_RUN_ID")
    assert harness.records.build_results(**fields, environment={})["run_id"] is None


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another user needs root")
def test_files_go_to_the_results_owner_when_root(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVKIT_RESULTS_OWNER", "4321:8765")
    path = harness.records.write_results(
        tmp_path / "new" / "dir",
        harness.records.build_results(
            recipe="demo",
            run_name="x",
            started_at="",
            settings={},
            configuration={},
            timing={},
            metrics={},
            series={},
            environment={},
        ),
    )
    for owned in (path, path.parent, path.parent.parent):
        assert (owned.stat().st_uid, owned.stat().st_gid) == (4321, 8765)
    assert (tmp_path.stat().st_uid, tmp_path.stat().st_gid) == (0, 0)  # existing directories are left alone


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown to another user needs root")
def test_a_downloaded_tree_goes_to_the_results_owner(tmp_path, monkeypatch):
    (tmp_path / "MNIST" / "raw").mkdir(parents=True)
    (tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte").write_bytes(b"x")
    harness.files.chown_tree(tmp_path / "MNIST")  # no owner set: nothing changes
    assert (tmp_path / "MNIST" / "raw").stat().st_uid == 0
    monkeypatch.setenv("ENVKIT_RESULTS_OWNER", "4321:8765")
    harness.files.chown_tree(tmp_path / "MNIST")
    for path in (
        tmp_path / "MNIST",
        tmp_path / "MNIST" / "raw",
        tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte",
    ):
        assert (path.stat().st_uid, path.stat().st_gid) == (4321, 8765)


def test_bad_results_owner_is_a_recipe_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVKIT_RESULTS_OWNER", "alice")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(harness.RecipeError, match="ENVKIT_RESULTS_OWNER='alice' is not 'uid:gid'"):
        harness.files.chown_to_results_owner(tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"device": "cpu"}, "cpu"),
        ({"device": "tpu", "world_size": 8, "strategy": "xmp"}, "tpu-x8-xmp"),
        ({"device": "tpu", "world_size": 1, "strategy": "single"}, "tpu"),
        ({"device": "cuda", "world_size": 4, "parallel": "ddp"}, "cuda-x4-ddp"),
        ({"device": "cuda", "world_size": 1, "parallel": "none"}, "cuda"),
    ],
)
def test_default_run_names(kwargs, name):
    assert harness.default_run_name(**kwargs) == name


def test_print_lines_is_one_write_on_an_unbuffered_stdout(monkeypatch):
    # What PYTHONUNBUFFERED=1 (set in the images) makes stdout: text goes straight to the file,
    # one write per call. Two DDP ranks printing at once interleave at write boundaries.
    class Recorder(io.RawIOBase):
        def __init__(self):
            self.writes: list[bytes] = []

        def writable(self):
            return True

        def write(self, data):
            self.writes.append(bytes(data))
            return len(data)

    raw = Recorder()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="utf-8", write_through=True))
    harness.print_lines(["scatter (ddp rank 0/2, cpu): a", "second line"])
    assert raw.writes == [b"scatter (ddp rank 0/2, cpu): a\nsecond line\n"]


def test_progress_is_silent_when_disabled():
    items = [1, 2]
    assert harness.progress.progress(items, total=2, desc="x", enabled=False) is items


def test_timing_record_reports_the_first_epoch_apart():
    class History:
        epoch_s, iter_s, train_epoch_s, test_epoch_s, checkpoint_s = (
            [5.0, 1.0, 3.0],
            [0.5] * 6,
            [4.0, 0.5, 2.5],
            [1.0, 0.5, 0.5],
            [],
        )

    timing = harness.records.timing_record(History, 9.5)
    assert timing["total_s"] == 9.5 and timing["first_epoch_s"] == 5.0
    assert timing["epoch_s"] == {"mean": 3.0, "std": pytest.approx((8 / 3) ** 0.5), "n": 3}
    assert timing["steady_epoch_s"] == {"mean": 2.0, "std": 1.0, "n": 2}
    assert timing["checkpoint_s"]["n"] == 0


def test_settings_record_is_json_ready():
    import argparse

    record = harness.records.settings_record(argparse.Namespace(data_dir=Path("data"), epochs=2, lr=1.0))
    assert record == {"data_dir": "data", "epochs": 2, "lr": 1.0}
    assert list(record) == sorted(record)


def test_resume_checkpoint_starts_fresh_or_checks_settings(tmp_path, capsys):
    path = tmp_path / "demo-cpu.pt"
    assert harness.checkpoints.resume_checkpoint("demo.py", path, {"lr": 1.0}, announce=False) is None
    assert capsys.readouterr().err == ""
    assert harness.checkpoints.resume_checkpoint("demo.py", path, {"lr": 1.0}, announce=True) is None
    assert capsys.readouterr().err == f"demo.py: no checkpoint at {path}; starting from the first epoch\n"
    harness.checkpoints.save_checkpoint(path, {"epoch": 3, "training_settings": {"lr": 1.0}})
    assert harness.checkpoints.resume_checkpoint("demo.py", path, {"lr": 1.0}, announce=True)["epoch"] == 3
    with pytest.raises(harness.RecipeError, match="cannot resume"):
        harness.checkpoints.resume_checkpoint("demo.py", path, {"lr": 2.0}, announce=True)


def test_one_vocabulary_for_replicas_and_processes():
    single = harness.Replicas(torch.device("cpu"))
    assert (single.replicas, single.rank, single.world_size, single.nodes, single.processes_per_node) == (1, 0, 1, 1, 1)
    assert single.is_main and single.sum_over_processes([1.0, 2.0]) == [1.0, 2.0]
    spmd = harness.Replicas(torch.device("cpu"), replicas=8)  # one process feeds 8 replicas
    assert (spmd.replicas, spmd.world_size, spmd.processes_per_node) == (8, 1, 1)
    two_hosts = harness.Replicas(torch.device("cpu"), rank=3, world_size=4, nodes=2)
    assert (two_hosts.replicas, two_hosts.processes_per_node, two_hosts.is_main) == (4, 2, False)


def test_cpu_processes_share_one_thread_budget(monkeypatch):
    """Issue 32, make demo on 2 CPUs: one process and DDP×2 get the same threads in total (torchrun gave each
    DDP process one), so a speed-up measures the processes, not a thread count."""
    monkeypatch.setattr(harness.devices.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        single = harness.devices.share_threads(harness.Replicas(torch.device("cpu")))
        expected = {"budget": 4, "budget_from": "cpus", "processes": 1, "per_process": 4}
        assert single == expected and torch.get_num_threads() == 4
        two = harness.devices.share_threads(harness.Replicas(torch.device("cpu"), rank=1, world_size=2))
        assert two == {**expected, "processes": 2, "per_process": 2} and torch.get_num_threads() == 2
        # More processes than CPUs: one thread each, and the record says the budget was overdrawn.
        many = harness.devices.share_threads(harness.Replicas(torch.device("cpu"), world_size=8))
        assert many == {**expected, "processes": 8, "per_process": 1}
        # One process feeding several replicas (DP, SPMD) is one process: the whole budget.
        spmd = harness.devices.share_threads(harness.Replicas(torch.device("cpu"), replicas=8))
        assert spmd["per_process"] == 4
    finally:
        torch.set_num_threads(before)


def test_cpu_threads_take_the_budget_the_run_is_given(monkeypatch):
    """Issue 42 goal 3: OMP_NUM_THREADS is the run's budget on its host (a target's env, the user's shell),
    shared by its DDP processes, and the record says so; a value that is not a count of threads is not one."""
    monkeypatch.setattr(harness.devices.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        single = harness.devices.share_threads(harness.Replicas(torch.device("cpu")))
        assert single == {"budget": 1, "budget_from": "OMP_NUM_THREADS", "processes": 1, "per_process": 1}
        assert torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "6")
        two = harness.devices.share_threads(harness.Replicas(torch.device("cpu"), rank=1, world_size=2))
        assert (two["budget"], two["per_process"], torch.get_num_threads()) == (6, 3, 3)
        for unusable in ("0", "two", ""):
            monkeypatch.setenv("OMP_NUM_THREADS", unusable)
            assert harness.devices.thread_budget() == (4, "cpus")
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("device", "backend"), [("cpu", None), ("cuda", None), ("tpu", "torch_xla"), ("tpu", "torch_tpu")]
)
def test_configuration_records_hosts_processes_and_backend(device, backend):
    import argparse

    # The recipe's args.backend: the TPU backend it chose (recipes/tpu_backend.py), None off the TPU.
    args = argparse.Namespace(
        device=device, backend=backend, world_size=4, global_batch=64, per_device_batch=16, dataset="fake"
    )
    record = harness.configuration_record(
        args, harness.Replicas(torch.device("cpu"), world_size=4, nodes=2), model="m", image_size=28, parallel="ddp"
    )
    assert record == {
        "device": device,
        "backend": backend,
        "cores": None,
        "strategy": None,
        "parallel": "ddp",
        "world_size": 4,
        "nodes": 2,
        "processes_per_node": 2,
        "model": "m",
        "global_batch": 64,
        "per_device_batch": 16,
        "image_size": 28,
        "dataset": "fake",
    }


def test_results_are_the_schema_files_version():
    # The recipes cannot read envkit/data/results.schema.json in an image; this keeps their constant equal to it.
    version = results_schema()["properties"]["schema_version"]["const"]
    assert (
        harness.records.build_results(
            recipe="demo",
            run_name="x",
            started_at="",
            settings={},
            configuration={},
            timing={},
            metrics={},
            series={},
            environment={},
        )["schema_version"]
        == version
        == 3
    )


def test_the_cuda_torch_was_built_for_is_named_as_such_not_as_a_device():
    environment = harness.records.capture_environment(torch.device("cpu"), "cpu", Path("results"))
    assert "cuda" not in environment and environment["torch_cuda_build"] == torch.version.cuda


@pytest.mark.parametrize(
    ("argv", "replicas", "expected"),
    [
        ([], 8, (128, 1024, 8.0)),  # per-device default: the global batch grows with the replicas (E1)
        (["--global-batch", "256"], 2, (128, 256, 2.0)),
        (["--per-device-batch", "16", "--lr-scaling", "none"], 4, (16, 64, 1.0)),
    ],
)
def test_batch_arguments_scale_the_learning_rate(argv, replicas, expected):
    parser = harness.RecipeArgumentParser(prog="demo.py")
    harness.add_batch_arguments(
        parser, reference_batch=128, default="per-device", optimizer="SGD", lr=1.0, lr_scaling="linear"
    )
    args = parser.parse_args(argv)
    harness.resolve_batches(args, replicas, reference_batch=128, default="per-device")
    assert (args.per_device_batch, args.global_batch, args.effective_lr) == expected and args.world_size == replicas


def test_a_missing_optional_dependency_is_one_line_naming_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    import argparse

    with pytest.raises(harness.RecipeError) as raised:
        harness.arguments.check_progress_bars(argparse.Namespace(quiet=False))
    assert (
        str(raised.value) == "a progress bar needs tqdm, which is not installed here; use --quiet, or pip install tqdm"
    )
    harness.arguments.check_progress_bars(argparse.Namespace(quiet=True))  # no bar, no tqdm needed


def test_resuming_a_finished_run_is_nothing_to_do(tmp_path):
    import argparse

    args = argparse.Namespace(checkpoint_dir=tmp_path, run_name="r", resume=True, epochs=3, seed=0, max_steps=None)
    harness.checkpoints.save_checkpoint(
        tmp_path / "demo-r.pt",
        {"epoch": 3, "training_settings": {}, "rng": harness.checkpoints.rng_states(), "history": {"steps": 12}},
    )
    run = harness.Run(args, harness.Replicas(torch.device("cpu")), recipe="demo", prog="demo.py", resume_keys=())
    with pytest.raises(
        harness.RecipeError, match=r"^nothing to do: the checkpoint .*demo-r.pt already holds 3 epochs; raise --epochs"
    ):
        run.restore({})
    args.epochs, args.max_steps = 4, 12  # more epochs, but --max-steps already reached
    with pytest.raises(harness.RecipeError, match="nothing to do"):
        run.restore({})
    args.max_steps = None
    assert run.restore({}) == 3 and run.history.steps == 12 and args.resumed_from_epoch == 3


def test_resume_refuses_processes_that_see_different_checkpoints(tmp_path):
    import argparse

    class OtherHostHasNone(harness.Replicas):
        def sum_over_processes(self, values):  # this process saw epoch 2; the other process saw no checkpoint
            return [values[0] + 0, values[1] + 1]

    args = argparse.Namespace(checkpoint_dir=tmp_path, run_name="r", resume=True, epochs=3, seed=0)
    harness.checkpoints.save_checkpoint(tmp_path / "demo-r.pt", {"epoch": 2, "training_settings": {}})
    replicas = OtherHostHasNone(torch.device("cpu"), world_size=2)
    with pytest.raises(harness.RecipeError, match=r"do not all see the checkpoint .*\(this one: epoch 2\)"):
        harness.Run(args, replicas, recipe="demo", prog="demo.py", resume_keys=())
    assert (
        harness.Run(args, harness.Replicas(torch.device("cpu")), recipe="demo", prog="demo.py", resume_keys=()).saved[
            "epoch"
        ]
        == 2
    )


def test_the_recipes_gpu_ids_are_kinds_yaml_s_copy(monkeypatch):
    """The recipes never import envkit: their copy of GPUS's syntax is compared with envkit's data here."""
    from envkit.project.kinds import gpu_indices

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # restored after the test
    assert harness.devices.GPU_INDICES == gpu_indices()
    harness.devices.choose_gpus(" 1, 0")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1,0"
    with pytest.raises(harness.RecipeError, match="is not a comma-separated list"):
        harness.devices.choose_gpus("0,")


def test_the_recipes_results_folder_is_the_run_wrapper_s_copy():
    """The recipes never import envkit: their default results folder (a recipe run by hand) is compared here."""
    from envkit.support.provenance_records import RESULTS_FOLDER

    assert harness.arguments.RESULTS_FOLDER == RESULTS_FOLDER
