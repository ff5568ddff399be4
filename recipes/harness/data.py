"""In-memory datasets whose batches are one gather, their shards per process, and torchvision's
datasets."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from .devices import Replicas
from .errors import RecipeError
from .files import chown_tree


def fake_split(
    count: int,
    shape: Sequence[int],
    num_classes: int,
    *,
    template_seed: int,
    sample_seed: int,
    noise: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` images of ``shape`` and int64 labels: class template (from ``template_seed``)
    plus Gaussian noise and labels drawn from ``sample_seed``. Same seeds -> same tensors."""
    templates = torch.randn(
        (num_classes, *shape), generator=torch.Generator().manual_seed(template_seed)
    )
    sampler = torch.Generator().manual_seed(sample_seed)
    labels = torch.randint(0, num_classes, (count,), generator=sampler)
    images = templates[labels] + noise * torch.randn((count, *shape), generator=sampler)
    return images, labels


class IndexBatchDataset(torch.utils.data.Dataset):
    """In-memory tensors fetched a whole batch at a time.

    Used with ``DataLoader(..., sampler=BatchSampler(...), batch_size=None)`` a
    batch is one tensor gather instead of ``batch_size`` per-sample transforms and
    a collate, which keeps the input pipeline off the critical path.
    """

    def __init__(self, *tensors: torch.Tensor):
        if len({len(t) for t in tensors}) != 1:
            raise ValueError("all tensors must have the same length")
        self.tensors = tensors

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, indices):
        index = torch.as_tensor(indices, device=self.tensors[0].device)
        return tuple(t[index] for t in self.tensors)

    def to(self, device: torch.device) -> IndexBatchDataset:
        """The same data on ``device``: on a GPU, batches are then gathered there, with no copy per
        step."""
        return IndexBatchDataset(*(t.to(device) for t in self.tensors))


class ShardSampler(torch.utils.data.Sampler):
    """Evaluation shard ``rank::world``: unlike DistributedSampler it pads nothing,
    so summing correct counts over the shards counts every test image exactly once."""

    def __init__(self, length: int, rank: int = 0, world_size: int = 1):
        self.indices = range(rank, length, world_size)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def batch_loader(
    dataset: IndexBatchDataset,
    batch_size: int,
    *,
    train: bool,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    drop_last: bool = False,
) -> torch.utils.data.DataLoader:
    """A DataLoader of pre-collated batches from in-memory tensors.

    Training: a DistributedSampler shard (also at world size 1), shuffled from
    ``seed`` and the epoch set with ``loader.sampler.sampler.set_epoch`` (see
    :func:`set_loader_epoch`), so the order depends only on seed and epoch and a
    resumed run sees the same batches. Evaluation: an unpadded in-order shard.
    ``drop_last`` drops a final short training batch, whose new shape would make
    XLA compile the step again.
    """
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

    if train:
        order = DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed
        )
    else:
        order = ShardSampler(len(dataset), rank, world_size)
    return DataLoader(
        dataset,
        sampler=BatchSampler(order, batch_size, drop_last=drop_last and train),
        batch_size=None,
    )


def set_loader_epoch(loader: torch.utils.data.DataLoader, epoch: int) -> None:
    """Reshuffle a :func:`batch_loader` training loader for ``epoch``
    (DistributedSampler.set_epoch)."""
    loader.sampler.sampler.set_epoch(epoch)


def shard_loaders(
    train_set: IndexBatchDataset,
    test_set: IndexBatchDataset,
    replicas: Replicas,
    *,
    batch: int,
    test_batch: int,
    seed: int,
):
    """This process's training loader (its shuffled shard; a short last batch dropped: a new shape
    would make XLA compile again, and BatchNorm could see one image) and test loader (its unpadded
    shard)."""
    shard = {"seed": seed, "rank": replicas.rank, "world_size": replicas.world_size}
    train = batch_loader(train_set, batch, train=True, drop_last=True, **shard)
    if len(train) == 0:
        raise RecipeError(
            f"no training step: {len(train.sampler.sampler)} training images per data shard is "
            f"less than one batch of {batch}; use a smaller batch or more data"
        )
    return train, batch_loader(test_set, test_batch, train=False, **shard)


def open_dataset(
    dataset_class,
    data_dir: Path,
    folder: str,
    *,
    train: bool,
    download: bool,
    missing: str,
    fix: str,
):
    """``dataset_class(data_dir, train, download)`` from torchvision, or RecipeError: what is
    missing, why, what to do. What a download wrote under ``data_dir/folder`` goes to the results
    owner (see chown_tree)."""
    try:
        dataset = dataset_class(str(data_dir), train=train, download=download)
    except (RuntimeError, OSError) as exc:
        how = "the download failed" if download else "downloading is off (--no-download)"
        raise RecipeError(
            f"{missing} and {how} ({' '.join(str(exc).split())[:120]}); {fix}, allow the download, "
            "or use --dataset fake"
        ) from None
    if download:
        chown_tree(Path(data_dir) / folder)
    return dataset
