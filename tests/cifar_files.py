"""Write a tiny CIFAR-10 in the real on-disk format, so tests read it through torchvision's loader.

The real "python version" archive unpacks to ``cifar-10-batches-py/`` holding
``data_batch_1`` .. ``data_batch_5``, ``test_batch`` (pickled dicts with
``data``: uint8 [N, 3072] rows of 1024 red, 1024 green, 1024 blue values, and
``labels``: a list of ints) and ``batches.meta`` (``label_names``). The images
are the recipe's learnable fake ones, so a test can also check that training
learns something.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO_ROOT
from results_contract import assert_valid_results

LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
TRAIN_BATCHES = 5


def _write_pickle(path: Path, payload: dict) -> None:
    # Protocol 2: the real files were written by Python 2's cPickle.
    path.write_bytes(pickle.dumps(payload, protocol=2))


def _batch(images, labels, name: str) -> dict:
    return {
        "batch_label": name,
        "labels": [int(label) for label in labels],
        "data": images.reshape(len(images), -1).numpy(),  # [N, 3, 32, 32] -> rows of R, G, B planes
        "filenames": [f"{name.replace(' ', '_')}_{index}.png" for index in range(len(images))],
    }


def write_cifar10(root: Path, *, train_per_batch: int = 8, test_size: int = 16, seed: int = 0) -> Path:
    """Write ``root/cifar-10-batches-py`` with ``5 * train_per_batch`` training and ``test_size`` test images.

    The images are ``cifar.fake_images`` with sample seeds ``seed + 1`` (train) and ``seed + 2`` (test),
    the same as ``--dataset fake --seed SEED``, so tests can compare the two paths. Returns the folder.
    """
    # The recipe imports torch: only when data is written, so that the root conftest, which loads this
    # plugin, lets tests of packages that never touch torch collect and run where torch is not installed.
    import cifar

    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    train_images, train_labels = cifar.fake_images(TRAIN_BATCHES * train_per_batch, seed=seed, sample_seed=seed + 1)
    for index in range(TRAIN_BATCHES):
        part = slice(index * train_per_batch, (index + 1) * train_per_batch)
        name = f"training batch {index + 1} of {TRAIN_BATCHES}"
        _write_pickle(folder / f"data_batch_{index + 1}", _batch(train_images[part], train_labels[part], name))
    test_images, test_labels = cifar.fake_images(test_size, seed=seed, sample_seed=seed + 2)
    _write_pickle(folder / "test_batch", _batch(test_images, test_labels, "testing batch 1 of 1"))
    _write_pickle(
        folder / "batches.meta", {"label_names": LABEL_NAMES, "num_cases_per_batch": train_per_batch, "num_vis": 3072}
    )
    return folder


RECIPE = REPO_ROOT / "recipes" / "cifar.py"


TRAIN_PER_BATCH = 52  # x 5 training batches = 260 images: 16 steps of 16 per epoch


STEPS_PER_EPOCH = 5 * TRAIN_PER_BATCH // 16


TEST_IMAGES = 63  # odd: the two test shards differ (32 + 31), so only a global count gives a multiple of 1/63


# Learnable tiny data at 64 px: both runs reach 100% from the 4th epoch. At 32 px the last feature
# maps are 1x1, BatchNorm then normalises over only the 8 images of a DDP process (16 in one process),
# and DDP's accuracy trails by up to 0.1 for several epochs.
TRAINING = [
    "--image-size",
    "64",
    "--global-batch",
    "16",
    "--lr",
    "0.02",
    "--epochs",
    "6",
    "--quiet",
    "--dataset",
    "real",
    "--data-check",
    "exists",
    "--no-download",
]


def recipe(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # One thread per process: torchrun sets the same for each ddp process, and
    # oversubscribed OpenMP threads on a busy machine slow a run down tenfold.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(RECIPE), *argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def only_results(directory: Path) -> dict:
    (path,) = directory.glob("cifar-*.json")
    return assert_valid_results(path)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """The tiny CIFAR-10 the slow recipe tests train on; read only (--no-download --data-check exists)."""
    root = tmp_path_factory.mktemp("cifar")
    write_cifar10(root, train_per_batch=TRAIN_PER_BATCH, test_size=TEST_IMAGES)
    return root


@pytest.fixture(scope="session")
def ddp_one_host(tmp_path_factory, data_dir) -> tuple[subprocess.CompletedProcess, Path]:
    """TRAINING as DDP over two gloo processes on this host, with --show-scatter: the run and its results folder.
    tests/recipes/test_cifar_ddp.py checks it against one process and tests/integration/test_multihost.py two hosts
    against it; one run serves both (six epochs of two processes)."""
    cwd = tmp_path_factory.mktemp("ddp-one-host")
    argv = [*TRAINING, "--data-dir", str(data_dir), "--parallel", "ddp", "--nproc", "2", "--show-scatter"]
    return recipe([*argv, "--results-dir", "results"], cwd), cwd / "results"
