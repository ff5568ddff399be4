"""envkit.render.template_cache: envkit's templates compiled ahead of time (envkit/data/templates.json), Jinja's
bytecode cache for the rest."""

from __future__ import annotations

import importlib.util
import shutil

import jinja2
import pytest
from paths import REPO_ROOT

from envkit.project.load import load_config
from envkit.render import template_cache
from envkit.render.target_files import render_targets

GENERATOR = REPO_ROOT / "scripts" / "generate_validators.py"


def test_the_shipped_templates_are_what_jinja_compiles_from_templates_today():
    """Fails after a template under templates/ or Jinja's pin changed: run scripts/generate_validators.py."""
    spec = importlib.util.spec_from_file_location("generate_validators", GENERATOR)
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert generator.templates() == template_cache.SHIPPED.read_text(encoding="utf-8")


@pytest.fixture
def jinja_compiles(monkeypatch):
    """The names of the templates Jinja itself parses and compiles, from here on."""
    compiled = []
    original = jinja2.Environment.compile

    def compile(self, source, name=None, *args, **kwargs):
        compiled.append(name)
        return original(self, source, name, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "compile", compile)
    return compiled


def test_a_cold_render_compiles_none_of_envkits_templates_and_renders_the_same(
    repo_root, tmp_path, monkeypatch, jinja_compiles
):
    """Issue 42: on a cold cache Jinja parsed and compiled every template, most of the render's time after imports."""
    config = load_config(repo_root / "envkit.yaml")
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cold"))
    shipped = render_targets(config, ["cuda"])
    assert jinja_compiles == []
    monkeypatch.setattr(template_cache, "_shipped", lambda: {})  # as Jinja alone compiles them
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "colder"))
    assert render_targets(config, ["cuda"]) == shipped and jinja_compiles


def test_a_projects_own_template_is_compiled_from_its_own_text(repo_root, tmp_path, monkeypatch, jinja_compiles):
    project = tmp_path / "project"
    shutil.copytree(repo_root / "tests" / "example_project", project)
    (project / "templates").mkdir()
    own = (repo_root / "templates" / "dockerignore.j2").read_text() + "# the project's own line\n"
    (project / "templates" / "dockerignore.j2").write_text(own)
    (project / "envkit.yaml").write_text("targets:\n  cpu: {kind: cpu, torch: '2.9.0'}\n")
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cache"))
    files = {str(file.path): file.text for file in render_targets(load_config(project / "envkit.yaml"), ["cpu"])}
    assert files["cpu/.dockerignore"].endswith("# the project's own line\n")
    assert jinja_compiles == ["dockerignore.j2"]


def test_without_the_shipped_file_jinja_compiles_them_as_before(repo_root, tmp_path, monkeypatch, jinja_compiles):
    """A wheel built without envkit/data/templates.json, or a malformed one, costs the compile, never the render."""
    config = load_config(repo_root / "envkit.yaml")
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "shipped"))
    shipped = render_targets(config, ["cpu"])
    for text in (None, '{"templates": {}}'):
        path = tmp_path / "templates.json"
        if text is not None:
            path.write_text(text)
        monkeypatch.setattr(template_cache, "SHIPPED", path)
        template_cache._shipped.cache_clear()
        monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / f"cold-{text is None}"))
        assert render_targets(config, ["cpu"]) == shipped
    template_cache._shipped.cache_clear()
    assert jinja_compiles.count("Dockerfile.j2") == 2
