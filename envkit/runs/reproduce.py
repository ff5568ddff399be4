"""`envkit reproduce`: what a shared result recorded, run again, and whether its numbers held (issue 43).

A source (a record, a results folder) is read as `envkit report` reads it (envkit.runs.results), and its runs are
grouped into cases: the runs of one experiment, target and arguments at one git revision, on one lock and image.
Each case runs again from the project at its revision (a temporary ``git worktree``, removed after), and its
verdict puts the original beside the reproduction: each metric's difference against the experiment's tolerance
(envkit.yaml ``reproduce: {accuracy: 0.005}``, else DEFAULT_TOLERANCE of the original's mean), the wall time's
ratio with its interval by the report's one rule (envkit.runs.speedups), the environment's difference as `envkit
diff` compares two records (envkit.image.diff), and one word: reproduced, differs or not comparable.
"""

from __future__ import annotations

import contextlib
import math
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.image.diff import compare, format_sections
from envkit.image.inventory import from_environment
from envkit.runs import results
from envkit.runs.comparison import arguments_of, arguments_text, command_placements
from envkit.runs.grouping import group
from envkit.runs.model import Row
from envkit.runs.page_records import page_records
from envkit.runs.published import report_facts
from envkit.runs.speedup_bounds import flag_beyond
from envkit.runs.speedups import FASTER, SLOWER, assign_speedups, may_compare, verdict_text
from envkit.support.bounded_load import Refused, parse_json, read_text

# A metric the experiment gives no tolerance may differ by this share of the original's mean (stated in the verdict).
DEFAULT_TOLERANCE = 0.01
REPRODUCED, DIFFERS, NOT_COMPARABLE = "reproduced", "differs", "not comparable"
ORIGINAL, REPRODUCTION = "original", "reproduction"
NO_SAME_WORK = "no run of the reproduction did the original's work (its experiment and arguments)"
# The environment's sections whose difference is a difference of the run's software (envkit diff's titles).
SOFTWARE = ("versions", "python packages")


@dataclass(frozen=True)
class Case:
    """The original runs of one experiment, target and arguments, at one revision, on one lock and image."""

    experiment: str
    target: str | None  # the record's target (ENVKIT_TARGET), None where it names none
    arguments: tuple[str, ...]
    revision: str | None
    dirty: bool | None
    lock: str | None
    image: str | None
    runs: tuple[results.RunResult, ...]

    @property
    def title(self) -> str:
        return f"{self.experiment} on {self.target or 'no named target'}, arguments {arguments_text(self.arguments)}"


SOURCES = "give a results record (results/*.json), a results folder or a page envkit report --html wrote"


def _read(path: Path) -> str:
    try:
        return read_text(path)
    except OSError as exc:
        raise EnvkitError(f"cannot read {path}: {exc.strerror or exc}") from None
    except Refused as exc:
        raise EnvkitError(f"{exc.at(path)}; {SOURCES}") from None


def parse_record(path: Path, text: str) -> results.RunResult:
    """One record's text, as strictly as the report reads it; a newer schema or a run no wrapper started is
    refused."""
    try:
        document = parse_json(text)
    except Refused as exc:
        raise EnvkitError(f"{exc.at(path)}; {SOURCES}") from None
    version = document.get("schema_version") if isinstance(document, dict) else None
    if isinstance(version, int) and version > results.SCHEMA_VERSION:
        raise EnvkitError(
            f"{path}: a record of schema version {version}; this envkit reads versions up to "
            f"{results.SCHEMA_VERSION} and cannot promise to run it again: upgrade envkit"
        )
    try:
        run, _ = results.parse(path, text)
    except ValueError as exc:
        raise EnvkitError(f"{path} is not a results record envkit reads: {exc}") from None
    if run.run is None:
        raise EnvkitError(f"{path}: no run block (the run wrapper did not start it), so no command to run again")
    return run


def read_record(path: Path) -> results.RunResult:
    """One record file (see parse_record)."""
    return parse_record(path, _read(path))


def read_source(source: Path) -> tuple[list[results.RunResult], list[str], str | None]:
    """The runs a record, a results folder or a page holds, the warnings of the files it skipped, and the origin a
    page names (None elsewhere)."""
    if source.is_dir():
        runs, warnings = results.load_results(source)
        kept = [run for run in runs if run.run is not None]
        warnings += [
            f"{run.path}: no run block (the run wrapper did not start it): left out" for run in runs if run.run is None
        ]
        if not kept:
            raise EnvkitError(f"{source}: no record of a run the run wrapper started, so nothing to run again")
        return kept, warnings, None
    if source.suffix == ".json":
        return [read_record(source)], [], None
    if source.suffix in (".html", ".htm"):
        remote, found = page_records(source, _read(source))
        return [parse_record(path, text) for path, text in found], [], remote
    raise EnvkitError(f"{source}: neither a record (.json), a results folder nor a page (.html); {SOURCES}")


def cases_of(runs: list[results.RunResult]) -> list[Case]:
    """The runs grouped into cases, in the order of their first run's record."""
    grouped: dict[tuple, list[results.RunResult]] = {}
    for run in sorted(runs, key=lambda run: str(run.path)):
        environment = run.environment
        key = (
            run.experiment,
            run.target,
            arguments_of(run),
            environment.get("git_revision"),
            environment.get("git_dirty"),
            environment.get("lock_sha256"),
            environment.get("image"),
        )
        grouped.setdefault(key, []).append(run)
    return [Case(*key, runs=tuple(group)) for key, group in grouped.items()]


def refuse_unreproducible(case: Case, git_root: Path, remote: str | None = None) -> None:
    """A case whose project cannot be had as it ran: no revision, a dirty tree, a revision the clone lacks (where
    ``remote``, the origin a page names, is known, the line says where to fetch it from)."""
    where = f"{case.title} ({case.runs[0].path})"
    if case.revision is None:
        raise EnvkitError(f"{where}: the record names no git revision, so the project it ran cannot be had again")
    if case.dirty:
        raise EnvkitError(
            f"{where}: it ran on a work tree with uncommitted changes at {case.revision[:12]}; the record does not "
            "hold them, so reproduce cannot promise the same environment: commit, run again and share that record"
        )
    found = subprocess.run(
        ["git", "-C", str(git_root), "cat-file", "-e", f"{case.revision}^{{commit}}"], capture_output=True, check=False
    )
    if found.returncode != 0:
        fetch = f"git fetch {remote} {case.revision}" if remote else "git fetch it (or clone the project it came from)"
        raise EnvkitError(
            f"{where}: revision {case.revision[:12]} is not in the clone at {git_root}: {fetch} and run again"
        )


def git_root(directory: Path) -> Path:
    """The top of the git clone that holds ``directory``."""
    done = subprocess.run(
        ["git", "-C", str(directory), "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise EnvkitError(f"{directory} is not in a git clone: reproduce runs the project at its recorded revision")
    return Path(done.stdout.strip())


@contextlib.contextmanager
def worktree(root: Path, revision: str) -> Iterator[Path]:
    """The project at ``revision``: a detached ``git worktree`` in a temporary folder, removed after, even on
    failure."""
    folder = Path(tempfile.mkdtemp(prefix="envkit-reproduce-"))
    tree = folder / "project"
    added = subprocess.run(
        ["git", "-C", str(root), "worktree", "add", "--detach", "--quiet", str(tree), revision],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        if added.returncode != 0:
            last = (added.stderr.strip().splitlines() or ["no reason given"])[-1]
            raise EnvkitError(f"git worktree add {revision[:12]} failed: {last}")
        yield tree
    finally:
        removed = subprocess.run(
            ["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], capture_output=True, check=False
        )
        shutil.rmtree(folder, ignore_errors=True)
        if added.returncode == 0 and removed.returncode != 0:
            # Only then: prune also forgets the user's own worktrees whose folders are away (an unmounted disk).
            subprocess.run(["git", "-C", str(root), "worktree", "prune"], capture_output=True, check=False)


PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")


def recorded_python(case: Case) -> str | None:
    """The interpreter the original ran where this host has it (a name on PATH or a path that exists), else None."""
    program = case.runs[0].run["argv"][0] if case.runs[0].run["argv"] else ""
    if not PYTHON_NAME.match(Path(program).name):
        return None
    return program if (shutil.which(program) if "/" not in program else Path(program).is_file()) else None


def recipe_arguments(case: Case, run_arguments: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The words the original run added to its experiment's own (``run_arguments``: each of the experiment's runs'
    arguments at the revision): what follows '--' for `envkit experiment`."""
    for own in sorted(run_arguments, key=len, reverse=True):
        if case.arguments[: len(own)] == own:
            return case.arguments[len(own) :]
    raise EnvkitError(
        f"{case.title}: its arguments do not start with the experiment's own at {case.revision[:12]} "
        f"({' | '.join(arguments_text(own) for own in run_arguments)}), so envkit experiment cannot run them again"
    )


def same_work(case: Case, runs: list[results.RunResult]) -> list[results.RunResult]:
    """The reproduction's runs that did the case's work: an experiment of several runs (`runs:` in the table)
    runs them all, and only the one whose arguments the original's were is compared."""
    return [run for run in runs if run.experiment == case.experiment and arguments_of(run) == case.arguments]


@dataclass(frozen=True)
class Metric:
    name: str
    original: results.Stat | None
    reproduction: results.Stat | None
    tolerance: float | None
    declared: bool

    @property
    def held(self) -> bool:
        if self.original is None or self.reproduction is None or self.tolerance is None:
            return False
        difference = abs(self.reproduction.mean - self.original.mean)
        return math.isfinite(difference) and difference <= self.tolerance * (1 + 1e-9)

    def problem(self) -> str | None:
        """Why it did not hold, in words; None where it held."""
        if self.held:
            return None
        missing = [
            side for side, stat in ((ORIGINAL, self.original), (REPRODUCTION, self.reproduction)) if stat is None
        ]
        if missing:
            return f"{self.name} not reported by the {missing[0]}"
        return f"{self.name} {self.reproduction.mean - self.original.mean:+.4g} (tolerance {self.tolerance:.4g})"


@dataclass(frozen=True)
class Verdict:
    case: Case
    word: str
    reasons: tuple[str, ...]  # what differs, or why not comparable
    original: Row | None
    reproduction: Row | None
    metrics: tuple[Metric, ...] = ()
    environment: str = ""  # envkit diff's text, the first run of each side
    notes: tuple[str, ...] = ()


def _row(runs: list[results.RunResult], label: str) -> Row | None:
    """The runs as one row of the report's comparison (envkit.runs.comparison), labelled ``label``."""
    if not runs:
        return None
    # Every record judged by the command core: a seed recipe's scalar metrics (its test accuracy, final loss) are
    # what it reported, which the report shows in columns of a recipe's own instead (RunResult.program_metrics).
    sections = group(command_placements([replace(run, recipe=None) for run in runs], report_facts()))
    rows = [row for section in sections.values() for row in section.rows]
    return replace(rows[0], place=label) if len(rows) == 1 else None


def _metrics(original: Row, reproduction: Row, tolerances: dict[str, float]) -> tuple[Metric, ...]:
    names = sorted({*original.metrics, *reproduction.metrics})
    found = []
    for name in names:
        before = original.metrics.get(name)
        declared = name in tolerances
        tolerance = tolerances.get(name, abs(before.mean) * DEFAULT_TOLERANCE if before else None)
        found.append(Metric(name, before, reproduction.metrics.get(name), tolerance, declared))
    return tuple(found)


def _environment(original: results.RunResult, reproduction: results.RunResult) -> tuple[str, tuple[str, ...]]:
    """envkit diff between the two records' environments: its text, and the sections of the software that differ."""
    a = from_environment(f"original {original.path}", original.environment)
    b = from_environment(f"reproduction {reproduction.path}", reproduction.environment)
    sections = compare(a, b)
    differs = tuple(
        f"{section.title}: {'; '.join(section.changes[:3])}{' …' if len(section.changes) > 3 else ''}"
        for section in sections
        if section.title in SOFTWARE and section.differs
    )
    return format_sections(sections, a, b), differs


def _not_comparable(original: Row | None, reproduction: Row | None) -> str | None:
    """Why the two sides cannot be compared (None: they can). A side of no row is one whose runs split into
    several rows of a comparison (envkit.runs.comparison: a CPU stand-in among accelerator runs)."""
    for side, row in ((ORIGINAL, original), (REPRODUCTION, reproduction)):
        if row is None:
            return f"the {side}'s runs are not one row of a comparison (a CPU stand-in among them)"
    if original.succeeded == 0:
        return "the original has no successful run"
    if reproduction.succeeded == 0:
        outcomes = sorted({run.outcome for run in reproduction.results})
        return f"no run of the reproduction succeeded ({', '.join(outcomes)})"
    if original.device != reproduction.device:
        return f"another device: {reproduction.device} against the original's {original.device}"
    if reproduction.cpu_stand_in != original.cpu_stand_in:
        return "one side is a CPU stand-in for an accelerator"
    return None


def judge(case: Case, reproduced: list[results.RunResult], tolerances: dict[str, float], target: str | None) -> Verdict:
    """The verdict of one case: its original runs beside ``reproduced``, run as ``target`` (None: the original's)."""
    original, reproduction = _row(list(case.runs), ORIGINAL), _row(reproduced, REPRODUCTION)
    notes = ()
    if target is not None and target != case.target:
        notes = (
            f"reproduced on another target ({target}; the original ran on {case.target}): a difference is expected",
        )
    why = _not_comparable(original, reproduction) if reproduced else NO_SAME_WORK
    if why is not None:
        return Verdict(case, NOT_COMPARABLE, (why,), original, reproduction, notes=notes)
    assign_speedups([original, reproduction], declared=ORIGINAL)
    flag_beyond([original, reproduction])  # a busy host or another thread budget: the time is no result
    metrics = _metrics(original, reproduction, tolerances)
    reasons = [problem for metric in metrics if (problem := metric.problem())]
    first_original = next(run for run in case.runs if run.succeeded)
    first_reproduced = next(run for run in reproduced if run.succeeded)
    text, software = _environment(first_original, first_reproduced)
    reasons += [f"environment: {line}" for line in software]
    same_host = first_original.environment.get("host") == first_reproduced.environment.get("host")
    if reproduction.speedup_beyond is not None:
        notes += (f"wall time not judged: {reproduction.speedup_beyond}",)
    elif reproduction.verdict in (FASTER, SLOWER) and same_host:
        reasons.append(f"wall time {verdict_text(reproduction)}")
    elif reproduction.verdict in (FASTER, SLOWER):
        notes += ("wall time on another host: shown, not judged",)
    word = DIFFERS if reasons else REPRODUCED
    return Verdict(case, word, tuple(reasons), original, reproduction, metrics, text, notes)


def _stat(stat: results.Stat | None) -> str:
    if stat is None:
        return "—"
    return f"{stat.mean:.6g} ± {stat.std:.2g} (n={stat.n})"


def _table_row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _time_line(verdict: Verdict) -> str:
    """The wall time of both sides, the reproduction's speed against the original's and its verdict."""
    original, reproduction = verdict.original, verdict.reproduction
    times = (_stat(original.wall_time_s), _stat(reproduction.wall_time_s))
    if reproduction.speedup is None:
        return _table_row("wall time (s)", *times, "—", "—", "no measured wall time on a side to compare")
    ratio = f"{reproduction.speedup:.3g}× the original's speed"
    return _table_row("wall time (s)", *times, ratio, "—", verdict_text(reproduction))


def _metric_line(metric: Metric) -> str:
    if metric.original is None or metric.reproduction is None:
        difference = "—"
    else:
        difference = f"{metric.reproduction.mean - metric.original.mean:+.4g}"
    if metric.tolerance is None:
        tolerance = "—"
    else:
        source = "declared" if metric.declared else f"default: {DEFAULT_TOLERANCE:.0%} of the original"
        tolerance = f"{metric.tolerance:.4g} ({source})"
    word = "held" if metric.held else DIFFERS
    return _table_row(metric.name, _stat(metric.original), _stat(metric.reproduction), difference, tolerance, word)


def verdict_markdown(verdicts: list[Verdict], source: str, results_dir: Path, steps: list[str]) -> str:
    """The verdict report: a section per case, the original beside the reproduction."""
    lines = [f"# Reproduction of {source}", "", f"Reproduced runs: {results_dir}", ""]
    lines += [f"- {step}" for step in steps]
    for verdict in verdicts:
        case = verdict.case
        lines += ["", f"## {case.title}: {_word(verdict)}", ""]
        lines.append(f"revision {case.revision}, lock {case.lock or 'none'}, image {case.image or 'none (a host run)'}")
        lines += [f"Note: {note}" for note in verdict.notes]
        if verdict.original is None or verdict.reproduction is None or verdict.word == NOT_COMPARABLE:
            continue
        lines += [
            "",
            "| | original | reproduction | difference | tolerance | verdict |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        runs = f"| runs (failed) | {verdict.original.runs} ({verdict.original.failed}) | "
        lines.append(runs + f"{verdict.reproduction.runs} ({verdict.reproduction.failed}) | | | |")
        lines.append(_time_line(verdict))
        lines += [_metric_line(metric) for metric in verdict.metrics]
        lines += ["", "Environment (envkit diff of the first successful run of each side):", "", "```"]
        lines += [verdict.environment, "```"]
    return "\n".join(lines) + "\n"


def verdict_page(verdicts: list[Verdict], path: Path, config: Path) -> int:
    """The verdict as a page (envkit report --html's): the report of both sides' runs, a row each for the original
    and the reproduction under the report's own rules (the original the baseline), its summary the verdict's words.
    Its records keep their targets (the row labels are the page's alone). The page's size in bytes."""
    from envkit.runs.html_page import write_page
    from envkit.runs.page_adapter import page_from_report
    from envkit.runs.report import build_report

    runs = [
        # Named by side too: a reproduction started within the original's second has its run name and start, which
        # the report would count as a copy of it (report.unique_runs). Each side's runs are the verdict's row's
        # (_row), judged as a command's: a seed recipe's would otherwise pool into one row of their configuration.
        replace(run, target=label, run_name=f"{label} {run.run_name}")
        for verdict in verdicts
        for label, side in ((ORIGINAL, verdict.original), (REPRODUCTION, verdict.reproduction))
        if side is not None
        for run in side.results
    ]
    declared = ORIGINAL if any(verdict.original and may_compare(verdict.original) for verdict in verdicts) else None
    page = page_from_report(build_report(runs, baseline=declared, config=config), [])
    words = " ".join(f"{verdict.case.title}: {_word(verdict)}." for verdict in verdicts)
    return write_page(replace(page, title="envkit reproduce: the original and its reproduction", summary=words), path)


def _word(verdict: Verdict) -> str:
    return verdict.word + (f": {'; '.join(verdict.reasons)}" if verdict.reasons else "")


def exit_status(verdicts: list[Verdict]) -> int:
    """0 only when every case reproduced, else 1."""
    return 0 if all(verdict.word == REPRODUCED for verdict in verdicts) else 1
