"""The harness every envkit recipe shares; a recipe file holds its network, data and training loop.

Read in this order (the last two only record, and a student can skip them):

- ``run``: one run's records (seed, clock, history, resume, checkpoints, results) that the recipe's loop calls;
- ``progress``: timers that sync the device once per epoch, and the progress bar;
- ``devices``: devices, seeding, and ``Replicas``, the one vocabulary for data parallelism;
- ``data``: in-memory datasets whose batches are one gather, and each process's shard;
- ``arguments``: the common arguments, batch size and learning-rate scaling (E3), warm-up, run names;
- ``checkpoints``: saving and resuming, atomically and only with the same settings;
- ``errors``: ``RecipeError``, one line and exit status 2 for anything a user can fix;
- ``records`` and ``files``: the results JSON, the environment it records, atomic writes, file owners.

Recipes run inside the images with only torch (+ tqdm, + torchvision for real data,
+ torch_xla on TPU) installed, so this package imports nothing else at top level and
never imports envkit. Recipes import it as a sibling (``python recipes/mnist.py`` puts
``recipes/`` on ``sys.path``); everything a recipe uses is ``harness.<name>``.
"""

from .arguments import (
    DATASETS,
    DEVICES,
    RecipeArgumentParser,
    WarmupThenDecay,
    add_batch_arguments,
    add_common_arguments,
    add_fake_data_arguments,
    check_progress_bars,
    check_run_name,
    default_run_name,
    non_negative_int,
    parse_arguments,
    positive_float,
    positive_int,
    resolve_batches,
)
from .checkpoints import (
    Checkpointer,
    check_resumable,
    checkpoint_path,
    load_checkpoint,
    restore_rng_states,
    resume_checkpoint,
    resume_settings,
    rng_states,
    save_checkpoint,
)
from .data import (
    IndexBatchDataset,
    ShardSampler,
    batch_loader,
    fake_split,
    open_dataset,
    set_loader_epoch,
    shard_loaders,
)
from .devices import (
    Replicas,
    after_step,
    choose_gpus,
    import_torch_xla,
    is_xla,
    seed_everything,
    select_device,
    synchronize,
    xla_compilations,
)
from .errors import RecipeError, fail, import_optional, print_lines, run_recipe
from .files import chown_to_results_owner, chown_tree, ensure_directory, json_bytes, write_atomic
from .progress import DeviceTimer, ProgressBar, StepTimer, progress
from .records import (
    SCHEMA_VERSION,
    build_results,
    capture_environment,
    configuration_record,
    git_revision,
    installed_distributions,
    settings_record,
    summarize,
    timing_record,
    write_results,
)
from .run import History, Run, global_accuracy
