"""The harness every envkit recipe shares; a recipe file holds its network, data and training loop.

Read in this order (the last two only record, and a student can skip them):

- ``run``: one run's records (seed, clock, history, resume, checkpoints, results) that the recipe's
  loop calls;
- ``progress``: timers that sync the device once per epoch, and the progress bar;
- ``devices``: devices, seeding, and ``Replicas``, the one vocabulary for data parallelism;
- ``data``: in-memory datasets whose batches are one gather, and each process's shard;
- ``arguments``: the common arguments, batch size and learning-rate scaling (E3), warm-up, run
  names;
- ``checkpoints``: saving and resuming, atomically and only with the same settings;
- ``errors``: ``RecipeError``, one line and exit status 2 for anything a user can fix;
- ``records`` and ``files``: the results JSON, the environment it records, atomic writes, file
  owners.

Recipes run inside the images with only torch (+ tqdm, + torchvision for real data, + torch_xla on
TPU) installed, so this package imports nothing else at top level and never imports envkit. Recipes
import it as a sibling (``python recipes/mnist.py`` puts ``recipes/`` on ``sys.path``): what the
recipes use is ``harness.<name>`` (``__all__``), the rest stays in its module
(``harness.records.capture_environment``).
"""

from .arguments import (
    RecipeArgumentParser,
    WarmupThenDecay,
    add_batch_arguments,
    add_common_arguments,
    add_fake_data_arguments,
    default_run_name,
    non_negative_int,
    parse_arguments,
    positive_float,
    positive_int,
    resolve_batches,
)
from .checkpoints import Checkpointer
from .data import (
    IndexBatchDataset,
    batch_loader,
    fake_split,
    open_dataset,
    set_loader_epoch,
    shard_loaders,
)
from .devices import Replicas, choose_gpus, import_torch_xla, select_device
from .errors import RecipeError, import_optional, print_lines, run_recipe
from .progress import StepTimer
from .records import configuration_record
from .run import Run, global_accuracy

__all__ = [
    "Checkpointer",
    "IndexBatchDataset",
    "RecipeArgumentParser",
    "RecipeError",
    "Replicas",
    "Run",
    "StepTimer",
    "WarmupThenDecay",
    "add_batch_arguments",
    "add_common_arguments",
    "add_fake_data_arguments",
    "batch_loader",
    "choose_gpus",
    "configuration_record",
    "default_run_name",
    "fake_split",
    "global_accuracy",
    "import_optional",
    "import_torch_xla",
    "non_negative_int",
    "open_dataset",
    "parse_arguments",
    "positive_float",
    "positive_int",
    "print_lines",
    "resolve_batches",
    "run_recipe",
    "select_device",
    "set_loader_epoch",
    "shard_loaders",
]
