"""envkit.project.secrets: what looks like a secret by content, with detect-secrets' detectors and without them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from envkit.project import detectors, secret_verdicts, secrets

# Put together, so that this file holds no token a scanner would flag.
AWS_KEY = "AKIA" + "Q2XW7ZJ5K3B4N6P8"
SLACK_WEBHOOK = "https://hooks.slack.com" + "/services/T0AB12CD3/B0EF45GH6/" + "aB3dE6gH9jK2mN5pQ8sT1vW4"
HF_TOKEN = "hf" + "_aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH"


@pytest.fixture
def without_detect_secrets(monkeypatch):
    """This Python as a notebook's kernel is: no detect-secrets to import."""
    for name in ["detect_secrets", *(name for name in sys.modules if name.startswith("detect_secrets."))]:
        monkeypatch.setitem(sys.modules, name, None)  # imported already by another test: its modules too
    cached = (secrets._detectors, secrets.imported_detectors, secret_verdicts.shipped_release_installed)
    for function in cached:
        function.cache_clear()
    yield
    for function in cached:
        function.cache_clear()


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """in_values_once with its cache in ``tmp_path``: the values secrets.in_values itself was asked about, in order."""
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path))
    asked, real = [], secrets.in_values
    monkeypatch.setattr(secrets, "in_values", lambda values: asked.append(values) or real(values))
    return asked


def judged(values):
    """The judge envkit.project.files gives: secrets.in_values, looked up at each call (``counted`` counts them)."""
    return secrets.in_values(values)


CLEAN = {"targets": {"cpu": {"kind": "cpu", "env": {"MODE": "fast"}}}}
HELD = {"targets": {"cpu": {"kind": "cpu", "env": {"HF_TOKEN": HF_TOKEN}}}}


def test_a_clean_verdict_is_kept_and_a_secret_is_found_every_time(counted, tmp_path, monkeypatch):
    """Issue 42: an unchanged envkit.yaml is not read by the patterns again at every render (about 5 ms, compiling
    them); a secret is never remembered away, and the rules that judged are in the key: changed, all is read again."""
    found = ("targets/cpu/env/HF_TOKEN", "holds a Hugging Face token")
    assert [secret_verdicts.in_values_once(CLEAN, judged) for _ in range(3)] == [None] * 3
    assert [secret_verdicts.in_values_once(HELD, judged) for _ in range(2)] == [found] * 2
    assert counted == [CLEAN, HELD, HELD]
    assert secret_verdicts.in_values_once({**CLEAN, "source": "mine"}, judged) is None
    assert len(counted) == 4  # other values: read
    changed = tmp_path / "secrets.py"
    changed.write_text(open(secrets.__file__).read() + "# a rule changed\n")
    monkeypatch.setattr(secret_verdicts, "RULE_SOURCES", (str(changed), secret_verdicts.RULE_SOURCES[1]))
    assert secret_verdicts.in_values_once(CLEAN, judged) is None
    assert counted[4:] == [CLEAN]


def test_clean_verdicts_are_kept_in_a_bounded_folder(counted, tmp_path, monkeypatch):
    monkeypatch.setattr(secret_verdicts, "ENTRIES", 2)
    folder, seen = tmp_path / "clean-values", set()
    for number in range(4):
        assert secret_verdicts.in_values_once({"source": f"run {number}"}, judged) is None
        for entry in set(folder.iterdir()) - seen:  # its verdict's marker: times a tick apart, run 0 the oldest
            os.utime(entry, ns=(10**18 + number * 10**12,) * 2)
            seen.add(entry)
    assert len(list(folder.iterdir())) == 2
    secret_verdicts.in_values_once({"source": "run 0"}, judged)  # the oldest went: read again
    assert len(counted) == 5


def test_no_verdict_is_kept_where_the_shipped_patterns_do_not_judge(counted, tmp_path, without_detect_secrets):
    """Another detect-secrets release (or none, said at every check) decides what the shipped patterns would."""
    assert [secret_verdicts.in_values_once(CLEAN, judged) for _ in range(2)] == [None] * 2
    assert counted == [CLEAN, CLEAN]
    assert not (tmp_path / "clean-values").exists()


def test_detect_secrets_tokens_are_redacted_whole_with_what_each_is():
    """Before (issue 39 §5): a Slack webhook or an AWS key in a run's arguments or stderr reached the report."""
    text = f"--notify {SLACK_WEBHOOK} --key {AWS_KEY} --hub {HF_TOKEN} done"
    assert secrets.redacted(text) == (
        "--notify [Slack Token, redacted] --key [AWS Access Key, redacted] --hub [a Hugging Face token, redacted] done"
    )


def test_another_detect_secrets_release_finds_and_redacts_with_its_own_patterns(monkeypatch):
    """Where the installed detect-secrets is not the release envkit/project/detectors.py was generated from, its own
    detectors' patterns are searched (skipping a text only where a pattern is one of the shipped ones, whose needs
    are known), each match judged by its detector, as the shipped ones are."""
    text = f"--notify {SLACK_WEBHOOK} --key {AWS_KEY} --hub {HF_TOKEN} done"
    shipped = [secrets.by_content(value.encode()) for value in (AWS_KEY, SLACK_WEBHOOK, "--epochs 3")]
    monkeypatch.setattr(secrets, "shipped_release_installed", lambda: False)
    secrets._detectors.cache_clear()
    try:
        installed = secrets.imported_detectors().values()
        assert [
            (rule.secret_type, [(pattern.text, pattern.flags) for pattern in rule.denylist])
            for rule in secrets._detectors()
        ] == [
            (detector.secret_type, [(pattern.pattern, pattern.flags) for pattern in detector.denylist])
            for detector in installed
        ]
        assert [secrets.by_content(value.encode()) for value in (AWS_KEY, SLACK_WEBHOOK, "--epochs 3")] == shipped
        assert shipped[:2] == [
            'holds a secret detect-secrets calls "AWS Access Key"',
            'holds a secret detect-secrets calls "Slack Token"',
        ]
        assert secrets.redacted(text).startswith("--notify [Slack Token, redacted] --key [AWS Access Key, redacted]")
    finally:
        secrets._detectors.cache_clear()


def test_a_token_form_inside_a_run_of_base64_is_not_a_secret():
    """A notebook's or a page's embedded zip or PNG: zero bytes encode as runs of A, which AWSKeyDetector's pattern
    (no word boundary) takes for a key: envkit's own notebooks were flagged."""
    import base64
    import io
    import zipfile

    stream = io.BytesIO()
    with zipfile.ZipFile(stream, "w") as archive:
        archive.writestr("envkit_notebook.py", "x = 1\n" * 4000)
    blob = base64.b64encode(stream.getvalue()).decode()
    assert "ABIA" in blob  # the zip's headers
    text = f'{{"source": ["{blob}"], "key": "{AWS_KEY}"}}'
    assert secrets.by_content(blob.encode()) is None
    assert secrets.redacted(text) == text.replace(AWS_KEY, "[AWS Access Key, redacted]")


def test_without_detect_secrets_envkits_own_rules_still_hold_and_one_line_says_so(without_detect_secrets, capsys):
    assert secrets.by_content(HF_TOKEN.encode()) == "holds a Hugging Face token"
    assert secrets.by_content(AWS_KEY.encode()) is None  # detect-secrets' detector finds it
    assert secrets.redacted(f"{AWS_KEY} {HF_TOKEN}") == f"{AWS_KEY} [a Hugging Face token, redacted]"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("envkit: detect-secrets is not installed in this Python")
    assert "pip install detect-secrets" in err


def test_detect_secrets_is_imported_when_a_pattern_first_matches_never_at_start():
    """Its import (about 0.4 s, requests with it) stays off every command's start-up, and off reading content
    that none of its patterns matches: envkit.yaml's values on every render (issue 42: 45% of a render's CPU)."""
    code = (
        "import sys, envkit.cli, envkit.runs.formats; from envkit.project import secrets; "
        "assert 'detect_secrets' not in sys.modules; "
        "assert secrets.by_content(b'image: python:3.11-slim, torch 2.9.0 https://example.com/simple') is None; "
        "assert 'detect_secrets' not in sys.modules; "
        f"assert secrets.by_content({AWS_KEY!r}.encode()) == 'holds a secret detect-secrets calls \"AWS Access Key\"'; "
        "assert 'detect_secrets' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_token_in_a_line_of_megabytes_is_found_where_the_line_is_cut():
    """detect-secrets' patterns see a long line (a notebook's embedded file) in windows: a token across the end
    of one window is whole in the next."""
    for offset in (0, secrets._LINE - 30, 3 * secrets._LINE + 7):
        line = "x" * offset + f" {SLACK_WEBHOOK} " + "y" * (4 * secrets._LINE)
        assert secrets.by_content(line.encode()) == 'holds a secret detect-secrets calls "Slack Token"', offset


# A JWT's three parts: a header and a payload that decode as JSON (JwtTokenDetector checks), then a signature.
JWT = "eyJhbGciOiAiSFMyNTYifQ" + ".eyJzdWIiOiAiMTIzNDU2Nzg5MCJ9." + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"


@pytest.mark.parametrize("around", ["--jwt {} done", '{{"jwt": "{}"}}', "Authorization: Bearer {}\n", "it was {}."])
def test_a_jwt_is_redacted_whole_signature_included(around):
    """Before: JwtTokenDetector's pattern ends lazily (``*?``), so its match stopped before the signature, which the
    redacted text kept after the label; now nothing of the token is left, as with every other redaction."""
    assert secrets.redacted(around.format(JWT)) == around.format("[JSON Web Token, redacted]")


def test_a_pattern_is_compiled_only_for_a_text_that_has_what_its_matches_need():
    """Issue 42: compiling some fifty patterns was most of the time a new envkit.yaml's check took, whose values are
    shorter than most tokens or lack their prefix; a token in them is found all the same."""
    values = {"targets": {"cuda": {"base_image": "python:3.11-slim-bookworm", "env": {"HUB": HF_TOKEN}}}}
    code = (
        "import json, re, sys; from envkit.project import secrets; "
        "found = secrets.in_values(json.loads(sys.argv[1])); "
        "print(json.dumps([found, [key[1] for key in re._cache if isinstance(key[1], str)]]))"
    )
    done = subprocess.run([sys.executable, "-c", code, json.dumps(values)], capture_output=True, text=True, check=True)
    found, compiled = json.loads(done.stdout)
    assert found == ["targets/cuda/env/HUB", "holds a Hugging Face token"]
    texts = ["targets", "cuda", "base_image", "python:3.11-slim-bookworm", "env", "HUB", HF_TOKEN]
    needed = {
        text
        for (text, _), (width, run) in detectors.NEEDS.items()
        if any(len(value) >= width and (run is None or run in value) for value in texts)
    }
    assert needed and set(compiled) & set(text for text, _ in detectors.NEEDS) == needed
