"""One training run's records: seed, clock, history, resume, checkpoints and results. The loop is
the recipe's.

A recipe's ``Trainer`` (pytorch/examples' DDP series shape) drives it::

    # seeds first
    run = harness.Run(args, replicas, recipe="mnist", prog="mnist.py", resume_keys=RESUME_KEYS)
    first_epoch = run.restore(parts)            # --resume: every part's state, RNGs, history
    for epoch in range(first_epoch, args.epochs):
        if run.out_of_steps(): break            # --max-steps
        run.start_epoch()
        ... train: run.progress_bar(...), harness.StepTimer, run.history.steps += 1,
                   run.history.add_training(laps)
        run.start_test()
        ... evaluate: harness.global_accuracy(...)
        run.end_epoch(epoch, lr=..., loss=..., accuracy=...)
        run.save_checkpoint(parts, epoch + 1)  # on the main process only
    run.write_results(configuration, metrics)

``parts`` names everything with a ``state_dict`` (model, optimizer, scheduler, ...); the checkpoint
keeps them under those names.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .checkpoints import Checkpointer, restore_rng_states, rng_states
from .devices import Replicas, is_xla, seed_everything, share_threads, xla_compilations
from .errors import RecipeError
from .progress import ProgressBar
from .records import (
    build_results,
    capture_environment,
    now_iso,
    series_record,
    settings_record,
    timing_record,
    write_results,
)


@dataclass
class History:
    """Everything measured so far; saved in checkpoints so a resumed run reports the whole run."""

    epoch_s: list = field(default_factory=list)
    train_epoch_s: list = field(default_factory=list)
    test_epoch_s: list = field(default_factory=list)
    checkpoint_s: list = field(default_factory=list)
    iter_s: list = field(default_factory=list)
    epoch_loss: list = field(default_factory=list)
    epoch_accuracy: list = field(default_factory=list)
    epoch_lr: list = field(default_factory=list)
    compilations: list = field(default_factory=list)  # XLA compilations after each epoch
    train_images: int = 0  # over all processes
    steps: int = 0
    elapsed_s: float = 0.0  # wall time of earlier (interrupted) segments

    def add_training(self, laps: list[float]) -> None:
        """One epoch's step laps (harness.StepTimer): per step, and their sum as the epoch's
        training time."""
        self.iter_s.extend(laps)
        self.train_epoch_s.append(sum(laps))


def global_accuracy(model: torch.nn.Module, batches: Iterable, replicas: Replicas) -> float:
    """Accuracy over the whole test set: each process counts its own shard on the device (no host
    sync per batch), then the counts are summed over processes, so no replica reports its shard
    alone."""
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=replicas.device)
    count = 0
    with torch.no_grad():
        for images, labels in batches:
            correct += (model(images).argmax(dim=1) == labels).sum()
            count += len(labels)
    correct_total, count_total = replicas.sum_over_processes([correct.item(), count])
    return correct_total / count_total


class Run:
    """One training run's records; see the module docstring for how a recipe's loop uses it."""

    def __init__(
        self,
        args: argparse.Namespace,
        replicas: Replicas,
        *,
        recipe: str,
        prog: str,
        resume_keys: Sequence[str],
    ):
        self.args = args
        self.replicas = replicas
        self.recipe = recipe
        self.prog = prog
        self.started_at = now_iso()
        self.started = time.perf_counter()
        self.checkpointer = Checkpointer(args, recipe=recipe, resume_keys=resume_keys)
        self.saved = (
            self.checkpointer.resume(prog, announce=replicas.is_main) if args.resume else None
        )
        if args.resume:
            self._check_every_process_resumes_alike()
        self.history = History()
        self._epoch_started = self._test_started = self.started
        seed_everything(args.seed, replicas.device)
        self.threads = share_threads(replicas)

    def _check_every_process_resumes_alike(self) -> None:
        """Rank 0 alone writes checkpoints: on several hosts, a host that cannot see them would
        start from the first epoch while the others resume, and the run would hang. Every process
        says so instead."""
        epoch = 0 if self.saved is None else self.saved["epoch"]
        total, processes = self.replicas.sum_over_processes([epoch, 1])
        if total != epoch * processes:
            raise RecipeError(
                f"--resume: the processes do not all see the checkpoint {self.checkpointer.path} "
                f"(this one: {'epoch ' + str(epoch) if self.saved else 'none'}); put "
                "--checkpoint-dir where every host sees it"
            )

    def elapsed_s(self) -> float:
        """Wall time of the whole run, earlier (interrupted) segments included."""
        return self.history.elapsed_s + time.perf_counter() - self.started

    def restore(self, parts: dict) -> int:
        """With --resume and a checkpoint: every part's state, the RNGs and the history so far.
        Returns the first epoch to train (0 without a checkpoint); RecipeError when none is left."""
        first_epoch = 0
        if self.saved is not None:
            for name, part in parts.items():
                part.load_state_dict(self.saved[name])
            restore_rng_states(self.saved["rng"], self.replicas.device)
            self.history = History(**self.saved["history"])
            first_epoch = self.saved["epoch"]
            if first_epoch >= self.args.epochs or self.out_of_steps():
                raise RecipeError(
                    f"nothing to do: the checkpoint {self.checkpointer.path} already holds "
                    f"{first_epoch} epochs; raise --epochs, or start without --resume"
                )
        self.args.resumed_from_epoch = first_epoch if self.saved is not None else None
        return first_epoch

    def out_of_steps(self) -> bool:
        """Whether --max-steps steps have been taken."""
        return self.args.max_steps is not None and self.history.steps >= self.args.max_steps

    def progress_bar(self, batches: Iterable, steps: int, epoch: int) -> ProgressBar:
        """A bar over ``epoch``'s ``batches`` (``steps`` of them, or as many as --max-steps leaves),
        on the main process unless --quiet."""
        args, replicas = self.args, self.replicas
        total = steps if args.max_steps is None else min(steps, args.max_steps - self.history.steps)
        # TorchTPU: a .item() on rank 0 alone deadlocks the other ranks, so DDP there shows no loss.
        tpu_ranks = replicas.device.type == "tpu" and replicas.world_size > 1
        return ProgressBar(
            batches,
            total=total,
            desc=f"epoch {epoch + 1}/{args.epochs}",
            enabled=replicas.is_main and not args.quiet,
            log_every=args.log_every,
            device=replicas.device,
            show_loss=not tpu_ranks,
        )

    def start_epoch(self) -> None:
        self._epoch_started = time.perf_counter()

    def start_test(self) -> None:
        self._test_started = time.perf_counter()

    def end_epoch(self, epoch: int, *, lr: float, loss: float, accuracy: float) -> None:
        """Record the epoch: its learning rate, mean loss, test accuracy, times, and on XLA the
        graphs compiled so far (a steady run compiles everything in its first epoch). The main
        process prints one line unless --quiet."""
        now, history = time.perf_counter(), self.history
        history.epoch_lr.append(lr)
        history.epoch_loss.append(loss)
        history.epoch_accuracy.append(accuracy)
        history.test_epoch_s.append(now - self._test_started)
        history.epoch_s.append(now - self._epoch_started)
        if is_xla(self.replicas.device):
            history.compilations.append(xla_compilations())
        if self.replicas.is_main and not self.args.quiet:
            print(
                f"{self.prog}: epoch {epoch + 1}/{self.args.epochs}: loss {loss:.4f}, test "
                f"accuracy {accuracy:.4f}, train {history.train_epoch_s[-1]:.2f} s, test "
                f"{history.test_epoch_s[-1]:.2f} s",
                file=sys.stderr,
            )

    def save_checkpoint(self, parts: dict, epochs_done: int) -> None:
        """Save ``parts``, the RNGs and the history, atomically. Every replica holds the same
        weights: the main process alone writes them."""
        if not self.replicas.is_main:
            return
        started = time.perf_counter()
        self.checkpointer.save(
            parts,
            epochs_done,
            rng=rng_states(self.replicas.device),
            history={**vars(self.history), "elapsed_s": self.elapsed_s()},
        )
        self.history.checkpoint_s.append(time.perf_counter() - started)

    def write_results(self, configuration: dict, metrics: dict) -> Path | None:
        """Rank 0 writes ``<results-dir>/<recipe>-<run-name>.json`` and prints one summary line."""
        if not self.replicas.is_main:
            return None
        history = self.history
        if history.compilations:
            metrics = {
                **metrics,
                "xla_compilations": history.compilations[-1],
                "xla_compilations_per_epoch": history.compilations,
            }
        metrics = {
            "test_accuracy": history.epoch_accuracy[-1],
            "final_loss": history.epoch_loss[-1],
            "epoch_loss": history.epoch_loss,
            "epoch_test_accuracy": history.epoch_accuracy,
            "steps": history.steps,
            "epochs_completed": len(history.epoch_s),
            **metrics,
        }
        results = build_results(
            recipe=self.recipe,
            run_name=self.args.run_name,
            started_at=self.started_at,
            settings=settings_record(self.args),
            configuration=configuration,
            timing=timing_record(history, self.elapsed_s()),
            metrics=metrics,
            series=series_record(history),
            environment=capture_environment(
                self.replicas.device, self.args.device, self.args.results_dir
            ),
            threads=self.threads,
        )
        path = write_results(self.args.results_dir, results)
        timing = results["timing"]
        speed = f"{metrics['images_per_s']:.1f} images/s, " if "images_per_s" in metrics else ""
        print(
            f"{self.recipe} {results['run_name']}: {metrics['epochs_completed']} epochs, "
            f"{history.steps} steps, test accuracy {metrics['test_accuracy']:.4f}, "
            f"{speed}{timing['iter_s']['mean']:.4f} s/iter, train "
            f"{timing['train_epoch_s']['mean']:.2f} s/epoch, test "
            f"{timing['test_epoch_s']['mean']:.2f} s/epoch, first epoch "
            f"{timing['first_epoch_s']:.1f} s, total {timing['total_s']:.1f} s -> {path}"
        )
        return path
