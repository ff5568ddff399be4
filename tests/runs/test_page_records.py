"""The runs an `envkit report --html` page carries for `envkit reproduce PAGE` (issue 43 §1): read back whole,
inert in the page (an attribute of one <data> element), each environment's distributions held once."""

from __future__ import annotations

import html
import json
import subprocess

import pytest
from run_records import record

from envkit.cli import main
from envkit.errors import EnvkitError
from envkit.runs.page_records import ELEMENT_ID, git_remote, page_records
from envkit.runs.reproduce import read_source
from envkit.runs.results import load_results

DISTRIBUTIONS = ["tabulate==0.9.0", "torch==2.13.0"]
ENVKIT_PAGE = '<meta name="generator" content="envkit report --html">'


@pytest.fixture
def page(tmp_path, capsys, monkeypatch):
    """A page of three runs: two cpu runs of one environment, a cuda run of another, written outside a clone (the
    checkout the suite runs in has an origin in CI's clone)."""
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "results"
    for name, device, wall in (("a", "cpu", 10.0), ("b", "cpu", 12.0), ("c", "cuda", 3.0)):
        document = record(results, name, device=device, image=None, wall=wall, metrics={"acc": 0.5, "n": {"x": 1}})
        document["environment"]["distributions"] = DISTRIBUTIONS if device == "cpu" else ["torch==2.13.0"]
        (results / f"{name}.json").write_text(json.dumps(document))
    path = tmp_path / "page.html"
    assert main(["report", str(results), "--html", str(path)]) == 0
    capsys.readouterr()
    return path


def test_a_page_gives_back_the_runs_it_was_made_of(page):
    runs, warnings, remote = read_source(page)
    assert remote is None  # the report was written outside a clone
    originals, _ = load_results(page.parent / "results")
    assert warnings == [] and [str(run.path) for run in runs] == [f"{page}#{name}" for name in "abc"]
    for run, original in zip(runs, originals, strict=True):
        assert run.environment == original.environment
        assert run.metrics == original.metrics == {"acc": 0.5, "n.x": 1.0}
        assert {key: run.run[key] for key in ("experiment", "argv", "exit_status", "wall_time_s", "device")} == {
            key: original.run[key] for key in ("experiment", "argv", "exit_status", "wall_time_s", "device")
        }


def test_the_data_is_one_attribute_and_each_environment_is_held_once(page):
    text = page.read_text()
    assert text.count(f'<data id="{ELEMENT_ID}" value="') == 1 and "<script" not in text
    value = text.split(f'<data id="{ELEMENT_ID}" value="', 1)[1].split('"', 1)[0]
    data = json.loads(html.unescape(value))
    assert sorted(data["distributions"].values()) == [["tabulate==0.9.0", "torch==2.13.0"], ["torch==2.13.0"]]
    assert len({record["environment"]["distributions"] for record in data["records"]}) == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<html><head><meta name='generator' content='other'></head></html>", "not a page envkit report --html wrote"),
        (f"{ENVKIT_PAGE}<p>old</p>", "the page carries no runs to reproduce"),
        (
            f'{ENVKIT_PAGE}<data id="{ELEMENT_ID}" value="{{&#34;format&#34;: 9}}">',
            "its reproduction data is of format 9; this envkit reads 1",
        ),
        (
            f'{ENVKIT_PAGE}<data id="{ELEMENT_ID}" value="[1">',
            "its reproduction data cannot be read",
        ),
    ],
)
def test_a_page_without_envkits_data_is_one_line(tmp_path, text, expected):
    with pytest.raises(EnvkitError, match=expected) as raised:
        page_records(tmp_path / "page.html", text)
    assert "\n" not in str(raised.value)


def test_a_page_names_the_clones_origin_without_its_credentials(tmp_path, capsys):
    """Where a collaborator fetches a revision their clone lacks; a token in the origin's URL stays out of the page."""
    project = tmp_path / "project"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    origin = "https://alice:s3cret@git.example.com/team/project.git"
    subprocess.run(["git", "-C", str(project), "remote", "add", "origin", origin], check=True)
    assert git_remote(project) == "https://git.example.com/team/project.git"
    assert git_remote(tmp_path) is None
    record(project / "results", "a", device="cpu", image=None, wall=1.0, metrics={"acc": 0.5})
    page = project / "page.html"
    assert (
        main(["report", str(project / "results"), "--config", str(project / "envkit.yaml"), "--html", str(page)]) == 0
    )
    capsys.readouterr()
    assert "s3cret" not in page.read_text()
    assert read_source(page)[2] == "https://git.example.com/team/project.git"
