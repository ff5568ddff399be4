"""The records an `envkit report --html` page carries for `envkit reproduce PAGE` (issue 43 §1).

Inert in a browser: one ``<data>`` element whose ``value`` attribute holds the JSON (escaped by the template, so
no markup), no script, nothing loaded. Per run, what reproducing it needs: the run wrapper's block (experiment,
target, argv, exit status, wall time, the device it used), the metrics and the environment (git revision and
dirty state, lock sha256, image and its ID and digest, Python, host); each distinct list of installed
distributions is held once and named by its sha256, so a page of many runs of one environment holds it once.
Read back, each run is a record as the run wrapper writes its core, parsed as strictly as a results file.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

from envkit.errors import EnvkitError
from envkit.runs.results import SCHEMA_VERSION, RunResult
from envkit.support.bounded_load import Refused, parse_json

ELEMENT_ID = "envkit-reproduce"
FORMAT = 1  # the layout of the data below; a newer one is refused in one line
GENERATOR = "envkit report --html"
# The run wrapper's facts reproduction reads (envkit.runs.comparison, envkit.runs.speedups): the rest (its log,
# its wrapper process, stderr's tail) stays in the records.
RUN_KEYS = (
    "record_version",
    "run_id",
    "status",
    "experiment",
    "target",
    "argv",
    "args",
    "exit_status",
    "started_at",
    "wall_time_s",
    "cpu_time_s",
    "load_average",
    "conditions",
    "device",
    "data",
)


def git_remote(directory: Path) -> str | None:
    """The clone's origin, where the runs' revisions can be fetched from, without any user or password its URL
    holds (the page is shared); None outside a clone or without an origin."""
    done = subprocess.run(
        ["git", "-C", str(directory), "remote", "get-url", "origin"], capture_output=True, text=True, check=False
    )
    url = done.stdout.strip()
    if done.returncode != 0 or not url:
        return None
    parts = urllib.parse.urlsplit(url)
    if parts.scheme and "@" in parts.netloc:
        url = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return url


def page_data(runs: list[RunResult], remote: str | None = None) -> str:
    """The JSON a page carries: each run the wrapper started, once, in its records' order, and the clone's origin
    (``remote``) where one is known."""
    distributions: dict[str, list[str]] = {}
    records = []
    for run in sorted({str(run.path): run for run in runs if run.run is not None}.values(), key=lambda r: str(r.path)):
        environment = dict(run.environment)
        listed = environment.get("distributions")
        if isinstance(listed, list):
            digest = hashlib.sha256(json.dumps(listed).encode()).hexdigest()
            distributions[digest] = listed
            environment["distributions"] = digest
        records.append(
            {
                "schema_version": SCHEMA_VERSION,
                "run_name": run.run_name,
                "run": {key: run.run[key] for key in RUN_KEYS if key in run.run},
                "metrics": run.metrics,
                "environment": environment,
            }
        )
    if not records:
        return ""
    data = {"format": FORMAT, "distributions": distributions, "records": records}
    return json.dumps(data | ({"remote": remote} if remote else {}), sort_keys=True)


class _Finder(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.generator: str | None = None
        self.data: str | None = None

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        if tag == "meta" and values.get("name") == "generator":
            self.generator = values.get("content")
        if tag == "data" and values.get("id") == ELEMENT_ID:
            self.data = values.get("value")


def page_records(path: Path, text: str) -> tuple[str | None, list[tuple[Path, str]]]:
    """The origin a page names (None: none), and each run it carries as (where it came from: ``PAGE#run name``, its
    record's text)."""
    finder = _Finder()
    finder.feed(text)
    if finder.generator != GENERATOR:
        raise EnvkitError(f"{path}: not a page envkit report --html wrote; give such a page, a record or a folder")
    if not finder.data:
        raise EnvkitError(f"{path}: the page carries no runs to reproduce (written by an older envkit, or of no runs)")
    try:
        data = parse_json(finder.data)
        if data["format"] > FORMAT:
            raise EnvkitError(
                f"{path}: its reproduction data is of format {data['format']}; this envkit reads {FORMAT}: upgrade"
            )
        distributions, records = data["distributions"], data["records"]
        found = []
        for record in records:
            environment = record["environment"]
            if isinstance(environment.get("distributions"), str):
                environment["distributions"] = distributions[environment["distributions"]]
            found.append((Path(f"{path}#{record['run_name']}"), json.dumps(record)))
        remote = data.get("remote")
        return (remote if isinstance(remote, str) else None), found
    except (Refused, ValueError, KeyError, TypeError) as exc:
        raise EnvkitError(f"{path}: its reproduction data cannot be read ({type(exc).__name__}: {exc})") from None
