"""envkit.render.template_cache: envkit's templates compiled ahead of time (envkit/render/shipped_templates/),
Jinja's bytecode cache for the rest."""

from __future__ import annotations

import importlib.util
import shutil
import stat
from pathlib import Path

import jinja2
import pytest
from paths import REPO_ROOT

from envkit.project.load import load_config
from envkit.render import shipped_templates, template_cache
from envkit.render.target_files import render_targets, template_environment

GENERATOR = REPO_ROOT / "scripts" / "generate_validators.py"


def test_the_shipped_templates_are_what_jinja_compiles_from_templates_today():
    """Fails after a template under templates/ or Jinja's pin changed: run scripts/generate_validators.py."""
    spec = importlib.util.spec_from_file_location("generate_validators", GENERATOR)
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generated = generator.templates()
    folder = Path(shipped_templates.__file__).parent
    assert sorted(generated) == sorted(folder.glob("*.py"))
    assert all(path.read_text(encoding="utf-8") == text for path, text in generated.items())


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
    assert not (tmp_path / "cold" / "templates").exists()  # nothing kept, so no folder made for it
    monkeypatch.setattr(shipped_templates, "TEMPLATES", {})  # as Jinja alone compiles them
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
    # its code kept, in a folder made where it was written, its user's alone as the rest of envkit's cache
    (kept,) = (tmp_path / "cache" / "templates").glob("*/__jinja2_*.cache")
    assert [stat.S_IMODE(folder.stat().st_mode) for folder in (kept.parent, kept.parent.parent)] == [0o700, 0o700]
    # a file where the cache's folder would be: nothing read or kept, the template compiled again, the same files
    (tmp_path / "in-the-way").write_text("")
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "in-the-way" / "cache"))
    again = {str(file.path): file.text for file in render_targets(load_config(project / "envkit.yaml"), ["cpu"])}
    assert again == files and jinja_compiles == ["dockerignore.j2"] * 2


def test_without_the_shipped_modules_jinja_compiles_them_as_before(repo_root, tmp_path, monkeypatch, jinja_compiles):
    """A wheel built without a template's module, with an index of other settings or a damaged module, costs the
    compile, never the render."""
    config = load_config(repo_root / "envkit.yaml")
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "shipped"))
    shipped = render_targets(config, ["cpu"])
    assert jinja_compiles == []
    missing = {name: ("no_such_module", sha256) for name, (_, sha256) in shipped_templates.TEMPLATES.items()}
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "dockerfile_j2.py").write_text("def root(:\n")  # a module that does not parse
    for attribute, value in (("TEMPLATES", missing), ("SETTINGS", "other settings"), ("__path__", [str(damaged)])):
        with monkeypatch.context() as patched:
            patched.setattr(shipped_templates, attribute, value)
            patched.setenv("ENVKIT_CACHE_DIR", str(tmp_path / attribute))
            assert render_targets(config, ["cpu"]) == shipped
    assert jinja_compiles.count("Dockerfile.j2") == 3


def test_a_shipped_templates_code_names_the_template_as_jinjas_compile_does(repo_root, tmp_path, monkeypatch):
    """Jinja takes a template's file from its code, and its tracebacks name it: the template, not the module."""
    monkeypatch.setenv("ENVKIT_CACHE_DIR", str(tmp_path / "cold"))
    environment = template_environment(repo_root)
    source = environment.loader.get_source(environment, "run.sh.j2")[0]
    filename = str(repo_root / "templates" / "run.sh.j2")
    shipped = template_cache.shipped(environment, source, "run.sh.j2", filename)
    compiled = jinja2.Environment.compile(environment, source, "run.sh.j2", filename)
    assert shipped.co_filename == filename and code_files(shipped) == code_files(compiled) == {filename}
    template = environment.get_template("run.sh.j2")
    assert (
        template.filename == filename
        and template.debug_info == jinja2.Template.from_code(environment, compiled, environment.globals).debug_info
    )


def code_files(code) -> set[str]:
    """The file names of ``code`` and of every function inside it."""
    inner = (code_files(constant) for constant in code.co_consts if isinstance(constant, type(code)))
    return {code.co_filename}.union(*inner)
