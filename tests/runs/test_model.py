"""The report's model (envkit.runs.model): what a section and a row say of themselves, whatever grouping made them."""

from __future__ import annotations

from envkit.runs.model import OURS, Row, Section, comparison_device_rank, device_rank


def _row(place: str | None, device: str, rank: int) -> Row:
    return Row(
        source=OURS,
        source_short=OURS,
        recipe=None,
        configuration={"device": device},
        runs=1,
        total_s=None,
        first_epoch_s=None,
        stats={},
        test_accuracy=None,
        environment="",
        place=place,
        device_rank=rank,
    )


def test_a_section_s_title_is_the_heading_its_grouping_gave_and_its_differences():
    comparison = Section(None, None, {"title": "not read"}, ["Training speed"], differs=["arguments `--epochs 1`"])
    assert comparison.title == "Training speed · arguments `--epochs 1`"
    published = Section("mnist", "real", {"title": "not read"}, ["mnist", "dataset real"], apart="other work")
    assert published.title == "mnist · dataset real · published, compared with no run here"


def test_rows_sort_by_the_device_rank_their_grouping_gave_them():
    """Not by whether a row has a place (a command's) or none (a recipe's): the rank is the row's data."""
    rows = [_row("b-cpu", "cpu", 1), _row("a-tpu", "tpu", 0), _row(None, "cuda", 2)]
    assert [row.label for row in sorted(rows, key=Row.sort_key)] == ["a-tpu", "b-cpu", "cuda ×1"]
    # A comparison starts from the cpu, its default baseline; a recipe's rows and the published ones as published.
    assert [comparison_device_rank({"device": device}) for device in ("cpu", "tpu", "cuda")] == [0, 1, 1]
    ranks = [device_rank({"device": device}) for device in ("tpu", "cuda", "cpu", "ipu", None)]
    assert ranks == sorted(ranks) and len(set(ranks[:4])) == 4 and ranks[3] == ranks[4]
