"""The report's templates are compiled once per user, not once per report (render.template_env's
bytecode cache), and a cache folder that cannot be made costs nothing but the compile."""

from __future__ import annotations

import jinja2
import pytest

from vllm_load.report.render import template_env


def test_a_second_report_loads_the_templates_compiled_by_the_first(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = template_env().get_template("report.html")
    cached = list((tmp_path / "vllm-load").glob("templates-*/*.cache"))
    assert cached, "the first compile left nothing in the cache"

    def no_compile(*args, **kwargs):
        raise AssertionError("a cached template was compiled again")

    monkeypatch.setattr(jinja2.Environment, "compile", no_compile)
    second = template_env().get_template("report.html")
    assert second.render is not None and first.name == second.name


def test_a_cache_folder_that_cannot_be_made_only_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    env = template_env()
    assert env.bytecode_cache is None
    assert env.from_string("{{ x | pct }}").render(x=0.5)


@pytest.mark.parametrize("name", ["report.md", "locust.html"])
def test_a_cache_that_cannot_be_written_is_skipped(tmp_path, monkeypatch, name):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    env = template_env()
    for folder in (tmp_path / "vllm-load").glob("templates-*"):
        folder.rmdir()  # gone after the cache was set up: its files cannot be written
    assert env.get_template(name).name == name
