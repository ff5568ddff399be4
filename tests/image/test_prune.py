"""`envkit prune` against an in-memory engine that removes tags and images as dockerd does."""

from __future__ import annotations

import pytest
import requests

import docker
from envkit.cli import main
from envkit.image import prune

DAY = 86_400
LATEST_ID, OLDER_ID, OLDEST_ID = ("sha256:" + c * 64 for c in "abc")


def conflict(reference: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = 409
    return docker.errors.APIError(
        "409 Client Error",
        response=response,
        explanation=f'conflict: unable to remove repository reference "{reference}" (must force) - container 0f3 is using its referenced image',
    )


class FakeApi:
    """The engine's /images endpoints: list by repository or dangling+label, remove a tag or an id."""

    def __init__(self, images: list[dict], in_use: frozenset[str] = frozenset()):
        self.entries = {image["Id"]: image for image in images}
        self.in_use, self.removed = in_use, []

    def images(self, name=None, filters=None):
        if name:
            return [dict(e) for e in self.entries.values() if any(t.startswith(f"{name}:") for t in e["RepoTags"])]
        label = filters["label"]
        return [dict(e) for e in self.entries.values() if not e["RepoTags"] and label in e["Labels"]]

    def remove_image(self, reference):
        for image_id, entry in self.entries.items():
            if reference == image_id or reference in entry["RepoTags"]:
                left = [t for t in entry["RepoTags"] if t != reference]
                if not left and image_id in self.in_use:
                    raise conflict(reference)
                self.removed.append(reference)
                if left:
                    entry["RepoTags"] = left
                else:
                    del self.entries[image_id]
                return
        raise docker.errors.ImageNotFound(reference)


def entry(image_id: str, tags: list[str], created: int, label="io.envkit.target=cpu") -> dict:
    # Labels as the engine's label filter matches them: "key=value".
    return {"Id": image_id, "RepoTags": tags, "Created": created, "Size": 1_130_000_000, "Labels": [label]}


class FakeClient:
    def __init__(self, api: FakeApi):
        self.api = api


@pytest.fixture
def engine(monkeypatch):
    """latest, an image one day older and one two days older, of the cpu target."""
    api = FakeApi(
        [
            entry(OLDEST_ID, ["envkit-cpu:000000000001"], 1_700_000_000),
            entry(LATEST_ID, ["envkit-cpu:00000000000a", "envkit-cpu:latest"], 1_700_000_000 + 2 * DAY),
            entry(OLDER_ID, ["envkit-cpu:00000000000b"], 1_700_000_000 + DAY),
        ]
    )
    monkeypatch.setattr(prune, "connect_docker", lambda: FakeClient(api))
    return api


def envkit_prune(repo_root, capsys, *args):
    code = main(["prune", "cpu", "--config", str(repo_root / "envkit.yaml"), *args])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_everything_but_latest_goes_newest_first(engine, repo_root, capsys):
    code, out, err = envkit_prune(repo_root, capsys)
    assert code == 0
    assert out == [
        "removed envkit-cpu:00000000000b (1.13 GB, built 2023-11-15 22:13 UTC)",
        "removed envkit-cpu:000000000001 (1.13 GB, built 2023-11-14 22:13 UTC)",
    ]
    assert err == ["envkit: removed 2 old envkit-cpu image(s); envkit-cpu:latest is kept"]
    assert list(engine.entries) == [LATEST_ID]
    assert engine.entries[LATEST_ID]["RepoTags"] == ["envkit-cpu:00000000000a", "envkit-cpu:latest"]


def test_keep_spares_the_newest_older_images(engine, repo_root, capsys):
    code, out, _ = envkit_prune(repo_root, capsys, "--keep", "1")
    assert code == 0 and out == ["removed envkit-cpu:000000000001 (1.13 GB, built 2023-11-14 22:13 UTC)"]
    assert sorted(engine.entries) == sorted([LATEST_ID, OLDER_ID])


def test_dry_run_lists_and_removes_nothing(engine, repo_root, capsys):
    code, out, err = envkit_prune(repo_root, capsys, "--dry-run")
    assert code == 0
    assert [line.split(" (")[0] for line in out] == [
        "would remove envkit-cpu:00000000000b",
        "would remove envkit-cpu:000000000001",
    ]
    assert err == ["envkit: dry run: 2 old envkit-cpu image(s) would be removed; nothing was"]
    assert engine.removed == [] and len(engine.entries) == 3


def test_an_image_with_a_registry_name_only_loses_envkits_name(engine, repo_root, capsys):
    engine.entries[OLDER_ID]["RepoTags"].append("registry.example.com/team/envkit-cpu:00000000000b")
    _, out, _ = envkit_prune(repo_root, capsys)
    assert out[0] == (
        "untagged envkit-cpu:00000000000b (1.13 GB, built 2023-11-15 22:13 UTC; "
        "still named registry.example.com/team/envkit-cpu:00000000000b)"
    )
    assert engine.entries[OLDER_ID]["RepoTags"] == ["registry.example.com/team/envkit-cpu:00000000000b"]


def test_an_image_a_container_uses_is_kept_with_the_engines_reason(engine, repo_root, capsys):
    engine.in_use = frozenset({OLDER_ID})
    code, out, err = envkit_prune(repo_root, capsys)
    assert code == 0
    assert out == ["removed envkit-cpu:000000000001 (1.13 GB, built 2023-11-14 22:13 UTC)"]
    assert err[0].startswith("envkit: warning: kept envkit-cpu:00000000000b: conflict: unable to remove")
    assert "container 0f3 is using" in err[0]
    assert OLDER_ID in engine.entries


def test_untagged_leftovers_of_the_target_go_by_id(engine, repo_root, capsys):
    # A --no-cache rebuild moves the content tag to the new image; the old one keeps only its labels.
    leftover = "sha256:" + "d" * 64
    foreign = "sha256:" + "e" * 64
    engine.entries[leftover] = entry(leftover, [], 1_600_000_000)
    engine.entries[foreign] = entry(foreign, [], 1_600_000_000, label="io.envkit.target=cuda")
    _, out, _ = envkit_prune(repo_root, capsys)
    assert out[-1] == "removed untagged dddddddddddd (1.13 GB, built 2020-09-13 12:26 UTC)"
    assert leftover not in engine.entries and foreign in engine.entries


def test_nothing_to_prune_says_so(engine, repo_root, capsys):
    del engine.entries[OLDER_ID], engine.entries[OLDEST_ID]
    code, out, err = envkit_prune(repo_root, capsys)
    assert code == 0 and out == [] and err == ["envkit: no old envkit-cpu images to remove"]


def test_other_engine_errors_are_one_line_after_what_was_done(engine, repo_root, capsys, monkeypatch):
    response = requests.Response()
    response.status_code = 500
    original = engine.remove_image

    def fail_on_oldest(reference):
        if reference == "envkit-cpu:000000000001":
            raise docker.errors.APIError("500", response=response, explanation="driver failed removing layer")
        original(reference)

    monkeypatch.setattr(engine, "remove_image", fail_on_oldest)
    code, out, err = envkit_prune(repo_root, capsys)
    assert code == 1
    assert out == ["removed envkit-cpu:00000000000b (1.13 GB, built 2023-11-15 22:13 UTC)"]
    assert err == ["envkit: error: the engine could not remove envkit-cpu:000000000001: driver failed removing layer"]


@pytest.mark.parametrize("keep", ["-1", "two", "1.5"])
def test_a_bad_keep_is_one_line(repo_root, capsys, keep):
    with pytest.raises(SystemExit) as exited:
        main(["prune", "cpu", "--config", str(repo_root / "envkit.yaml"), "--keep", keep])
    err = capsys.readouterr().err.splitlines()
    assert exited.value.code == 2
    assert err == [
        f"envkit prune: error: argument --keep: '{keep}' is not a count: give a whole number, 0 or more (see 'envkit prune --help')"
    ]
