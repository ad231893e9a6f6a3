"""The report's templates are compiled once per user, not once per report (render.template_env's
bytecode cache), and a cache folder that cannot be made costs nothing but the compile."""

from __future__ import annotations

import os
import stat

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


def _cache_folder(root) -> str:
    from vllm_load import __version__

    return os.path.join(root, "vllm-load", f"templates-{__version__}")


def _set_up_by_another(folder: str, how: str) -> None:
    if how == "mode":
        os.chmod(folder, 0o777)
    elif os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    else:
        os.chown(folder, 65534, -1)  # nobody


@pytest.mark.parametrize("how", ["mode", "owner"])
def test_a_cache_folder_another_user_could_write_is_not_used(tmp_path, monkeypatch, how):
    # a compiled template is code run when loaded: a folder another user can write into would
    # let that user run code in every report
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = _cache_folder(tmp_path)
    os.makedirs(folder)
    _set_up_by_another(folder, how)
    env = template_env()
    assert env.bytecode_cache is None
    assert env.get_template("report.md").name == "report.md"  # the report is still made
    assert not os.listdir(folder)


@pytest.mark.parametrize("how", ["mode", "owner"])
def test_a_cached_template_another_user_could_have_written_is_compiled_again(
    tmp_path, monkeypatch, how
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    template_env().get_template("report.md")
    folder = _cache_folder(tmp_path)
    assert stat.S_IMODE(os.stat(folder).st_mode) & 0o077 == 0  # ours alone, as made
    cached = [os.path.join(folder, name) for name in os.listdir(folder)]
    assert cached, "the first compile left nothing in the cache"
    for path in cached:
        _set_up_by_another(path, how)
    compiled = []
    real_compile = jinja2.Environment.compile

    def counted(self, *args, **kwargs):
        compiled.append(args)
        return real_compile(self, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "compile", counted)
    env = template_env()
    assert env.bytecode_cache is not None  # the folder is still the user's alone
    assert env.get_template("report.md").name == "report.md"
    assert compiled, "a cached template another user could have written was loaded"
