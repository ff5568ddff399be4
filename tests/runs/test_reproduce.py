"""envkit reproduce's logic (issue 43): the cases a source holds, and the verdict of original against reproduction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import DATA
from run_records import record

from envkit.errors import EnvkitError
from envkit.runs import reproduce
from envkit.runs.reproduce import DIFFERS, NOT_COMPARABLE, REPRODUCED, cases_of, judge, read_record, read_source
from envkit.runs.results import SCHEMA_VERSION
from envkit.runs.welch import ratio_interval

REVISION = "0123456789abcdef0123456789abcdef01234567"


def _records(directory: Path, prefix: str, walls, accuracy=0.5, status=0, host="box", **changes) -> list:
    """One record per wall time, as the run wrapper writes a host run of `train --seed 1` at REVISION."""
    for number, wall in enumerate(walls):
        document = record(
            directory,
            f"{prefix}{number}",
            device="cpu",
            image=None,
            wall=wall,
            status=status,
            metrics={"accuracy": accuracy},
            argv=("python", "train.py", "--seed", "1"),
            target="cpu",
            started_at=f"2026-11-25T22:00:0{number}+00:00",
        )
        document["run"]["target"] = "cpu"
        document["environment"] |= {"git_revision": REVISION, "git_dirty": False, "host": host, **changes}
        (directory / f"{prefix}{number}.json").write_text(json.dumps(document))
    return [read_record(directory / f"{prefix}{number}.json") for number in range(len(walls))]


def _verdict(tmp_path, original, reproduced, tolerances=None, target=None):
    (case,) = cases_of(original)
    return judge(case, reproduced, tolerances or {}, target)


def test_the_same_numbers_are_reproduced(tmp_path):
    original = _records(tmp_path / "a", "o", [1.0, 1.1])
    verdict = _verdict(tmp_path, original, _records(tmp_path / "b", "r", [1.05, 1.0]))
    assert verdict.word == REPRODUCED and verdict.reasons == ()
    assert reproduce.exit_status([verdict]) == 0
    (accuracy,) = verdict.metrics
    assert accuracy.held and accuracy.tolerance == pytest.approx(0.005) and not accuracy.declared


def test_a_metric_beyond_its_tolerance_differs_and_names_it(tmp_path):
    original = _records(tmp_path / "a", "o", [1.0])
    verdict = _verdict(tmp_path, original, _records(tmp_path / "b", "r", [1.0], accuracy=0.52))
    assert verdict.word == DIFFERS and verdict.reasons == ("accuracy +0.02 (tolerance 0.005)",)
    assert reproduce.exit_status([verdict]) == 1


def test_the_experiments_declared_tolerance_replaces_the_default(tmp_path):
    original = _records(tmp_path / "a", "o", [1.0])
    reproduced = _records(tmp_path / "b", "r", [1.0], accuracy=0.52)
    verdict = _verdict(tmp_path, original, reproduced, {"accuracy": 0.05})
    assert verdict.word == REPRODUCED and verdict.metrics[0].declared
    markdown = reproduce.verdict_markdown([verdict], "src", tmp_path, [])
    assert "| accuracy | 0.5 ± 0 (n=1) | 0.52 ± 0 (n=1) | +0.02 | 0.05 (declared) | held |" in markdown


def test_the_wall_time_is_judged_by_the_reports_one_rule_on_the_same_host(tmp_path):
    """Slower on the same host is a difference; its interval is welch's, as every speed-up's."""
    before, after = [1.0, 1.01, 0.99], [2.0, 2.02, 1.98]
    original = _records(tmp_path / "a", "o", before)
    verdict = _verdict(tmp_path, original, _records(tmp_path / "b", "r", after))
    low, high = ratio_interval(before, after)
    assert verdict.word == DIFFERS
    assert verdict.reasons == (f"wall time slower (95% {low:.2f}–{high:.2f}; 3 and 3 runs)",)
    elsewhere = _verdict(tmp_path, original, _records(tmp_path / "c", "r", after, host="other"))
    assert elsewhere.word == REPRODUCED and elsewhere.notes == ("wall time on another host: shown, not judged",)


def test_a_wall_time_measured_on_a_busy_host_is_not_judged(tmp_path):
    """The report's rule for a busy host (speedup_bounds.conditions_flag) holds the time's verdict back."""
    before, after = [1.0, 1.01, 0.99], [2.0, 2.02, 1.98]
    original = _records(tmp_path / "a", "o", before)
    reproduced = _records(tmp_path / "b", "r", after)
    conditions = {"thread_variables": {}, "torch_threads": [], "cpus": 2, "cpu_quota": None, "usable_cpus": 2}
    busy = []
    for run in reproduced:
        document = json.loads(run.path.read_text())
        document["run"] |= {"conditions": {**conditions, "cpu_share": 0.5}, "load_average": [9.1, 9.0]}
        run.path.write_text(json.dumps(document))
        busy.append(read_record(run.path))
    verdict = _verdict(tmp_path, original, busy)
    assert verdict.word == REPRODUCED
    assert verdict.notes == ("wall time not judged: host busy: load 9.1 on 2 CPUs; this speed-up is not a result",)


def test_a_failed_reproduction_is_not_comparable(tmp_path):
    original = _records(tmp_path / "a", "o", [1.0])
    verdict = _verdict(tmp_path, original, _records(tmp_path / "b", "r", [1.0], status=3))
    assert verdict.word == NOT_COMPARABLE and verdict.reasons == (
        "no run of the reproduction succeeded (exit status 3)",
    )
    assert reproduce.exit_status([verdict]) == 1


def test_another_environment_differs_with_envkit_diffs_lines(tmp_path):
    original = _records(tmp_path / "a", "o", [1.0], distributions=["tabulate==0.9.0"])
    verdict = _verdict(tmp_path, original, _records(tmp_path / "b", "r", [1.0], distributions=["tabulate==0.8.0"]))
    assert verdict.word == DIFFERS and verdict.reasons == ("environment: python packages: tabulate: 0.9.0 -> 0.8.0",)
    assert "python packages: 1 of 1 differ" in verdict.environment


def test_another_target_says_a_difference_is_expected(tmp_path):
    original = _records(tmp_path / "a", "o", [1.0])
    verdict = _verdict(tmp_path, original, _records(tmp_path / "b", "r", [1.0]), target="cpu-2")
    assert verdict.notes == ("reproduced on another target (cpu-2; the original ran on cpu): a difference is expected",)


def test_the_verdicts_page_has_both_sides_even_where_the_reproduction_shares_the_run_names_and_starts(tmp_path):
    """Before: a reproduction started within the original's second (its run name and start alike) was taken by the
    report for a copy of the original, and left off the page."""
    original = _records(tmp_path / "a", "o", [1.0, 1.1])
    verdict = _verdict(tmp_path, original, _records(tmp_path / "b", "o", [1.05, 1.0]))
    assert reproduce.verdict_page([verdict], tmp_path / "v.html", tmp_path / "envkit.yaml") > 0
    page = (tmp_path / "v.html").read_text()
    assert "<td>original</td>" in page and "<td>reproduction</td>" in page and "<script" not in page
    assert "train on cpu, arguments `--seed 1`: reproduced." in page


def test_a_seed_recipes_runs_are_judged_by_their_metrics_and_the_page_has_both_sides(tmp_path):
    """Before: a seed recipe's records (recipe, configuration, timing: mnist's) pooled on the page into one row of
    their configuration, so the original, the page's declared baseline, matched no row: envkit reproduce of an
    image run of recipes/mnist.py stopped with "--baseline 'original' matches no configuration", no page written."""
    recipe = json.loads((DATA / "results" / "e3" / "mnist-e3-batch-scaling-b128-scaled.json").read_text())
    sides = []
    for side, prefix in (("a", "o"), ("b", "r")):
        records = _records(tmp_path / side, prefix, [1.0, 1.1])
        for run in records:
            document = json.loads(run.path.read_text())
            document |= {key: recipe[key] for key in ("recipe", "configuration", "settings", "timing")}
            document["environment"] = recipe["environment"] | document["environment"]
            run.path.write_text(json.dumps(document))
        sides.append([read_record(run.path) for run in records])
    verdict = _verdict(tmp_path, *sides)
    # Its metrics are judged as a command's (after the one row builder, a recipe's row had none: nothing compared).
    assert verdict.word == REPRODUCED and [metric.name for metric in verdict.metrics] == ["accuracy"]
    assert reproduce.verdict_page([verdict], tmp_path / "v.html", tmp_path / "envkit.yaml") > 0
    page = (tmp_path / "v.html").read_text()
    assert "<td>original</td>" in page and "<td>reproduction</td>" in page


def test_only_the_reproductions_runs_of_the_originals_work_are_compared(tmp_path):
    """An experiment of several runs runs them all: the others are left out, and none of the work is no verdict."""
    (case,) = cases_of(_records(tmp_path / "a", "o", [1.0]))
    same = _records(tmp_path / "b", "r", [1.0])
    other = record(tmp_path / "b", "x", device="cpu", image=None, wall=1.0, argv=("python", "train.py", "--seed", "2"))
    (tmp_path / "b" / "x.json").write_text(json.dumps(other))
    found = reproduce.same_work(case, [*same, read_record(tmp_path / "b" / "x.json")])
    assert found == same
    verdict = judge(case, reproduce.same_work(case, [read_record(tmp_path / "b" / "x.json")]), {}, None)
    assert verdict.word == NOT_COMPARABLE and verdict.reasons == (reproduce.NO_SAME_WORK,)


def test_cases_are_the_runs_of_one_revision_and_arguments(tmp_path):
    runs = _records(tmp_path / "a", "o", [1.0, 1.1]) + _records(tmp_path / "b", "p", [1.0], git_revision="ab" * 20)
    cases = cases_of(runs)
    assert [(case.revision, len(case.runs)) for case in cases] == [(REVISION, 2), ("ab" * 20, 1)]
    assert cases[0].arguments == ("--seed", "1")


def test_recipe_arguments_are_what_the_run_added_to_its_experiments(tmp_path):
    (case,) = cases_of(_records(tmp_path / "a", "o", [1.0]))
    assert reproduce.recipe_arguments(case, [(), ("--seed",)]) == ("1",)
    with pytest.raises(EnvkitError, match="do not start with the experiment's own"):
        reproduce.recipe_arguments(case, [("--epochs", "2")])


def test_a_newer_record_and_an_empty_folder_are_refused(tmp_path):
    (original,) = _records(tmp_path / "a", "o", [1.0])
    document = json.loads(original.path.read_text())
    original.path.write_text(json.dumps(document | {"schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(EnvkitError, match=f"schema version {SCHEMA_VERSION + 1}; this envkit reads versions up to"):
        read_record(original.path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(EnvkitError, match="no record of a run the run wrapper started"):
        read_source(tmp_path / "empty")
    with pytest.raises(
        EnvkitError, match=r"page.txt: neither a record \(.json\), a results folder nor a page \(.html\); give"
    ):
        read_source(tmp_path / "page.txt")
