"""The README's first lines work as written on a distribution Python that refuses a bare `pip
install` (PEP 668): they make and enter a virtual environment first, install vllm-load without
the test extra (about 1 GB: transformers, selenium, mypy, ...) for the demo, and their test
command is exactly what CI runs (.ci/run). Every `vllm-load` command the README and the docs pages
show parses as `vllm-load --help` says."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex

from support import ROOT

CI_MARKER = "# --- the README's test command ---"


def first_commands() -> list[str]:
    """The commands of the README's first code block, comments stripped."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        match = re.search(r"```bash\n(.*?)```", fh.read(), re.S)
    assert match, "the README has no bash block"
    lines = [line.split("  #")[0].strip() for line in match.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def index_of(commands: list[str], pattern: str) -> int:
    found = [i for i, command in enumerate(commands) if re.search(pattern, command)]
    assert found, f"no README command matches {pattern!r}: {commands}"
    return found[0]


def test_the_first_lines_enter_a_virtual_environment_before_installing():
    commands = first_commands()
    venv = index_of(commands, r"^python3 -m venv (\S+) && \. \1/bin/activate$")
    assert venv == 0 and index_of(commands, r"\bpip install\b") > venv


def test_the_demo_installs_without_the_test_extra():
    commands = first_commands()
    demo = index_of(commands, r"^vllm-load demo\b")
    assert index_of(commands, r"^pip install -e \.$") < demo
    assert index_of(commands, r"\.\[test\]") > demo  # the test extra only for the tests


def test_ci_runs_exactly_the_readme_test_command():
    readme = first_commands()
    test_command = readme[index_of(readme, r"\bpytest\b")]
    assert "'.[test]'" in test_command and test_command.endswith("pytest")
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as fh:
        ci = fh.read().splitlines()
    assert CI_MARKER in ci, f".ci/run has no line {CI_MARKER!r}"
    after = [line for line in ci[ci.index(CI_MARKER) + 1 :] if line.strip()]
    assert after == [test_command], (after, test_command)


# --- every vllm-load command of the README and the docs pages -------------------------------

#: what ends a command on a shell line (shlex with punctuation_chars returns each as a token)
SHELL_SEPARATORS = {"&&", "||", "|", ";", "&", "(", ")"}


def documented_pages() -> list[str]:
    return ["README.md"] + sorted(
        os.path.join("docs", name)
        for name in os.listdir(os.path.join(ROOT, "docs"))
        if name.endswith(".md")
    )


def shell_commands(line: str) -> list[list[str]]:
    """The commands of one shell line, as bash splits them: at `&&`, `|`, `;`, `&`, parentheses;
    a redirection (`<`, `>`) stays in its command as its own token, so a command that bash would
    cut at an unquoted `<=` is seen cut."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in SHELL_SEPARATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    return [command for command in commands if command]


def documented_vllm_load_commands() -> list[tuple[str, str, list[str]]]:
    """(page, line, arguments) of every `vllm-load ...` in a bash block of the README or a docs
    page, continuation lines joined."""
    found = []
    for page in documented_pages():
        with open(os.path.join(ROOT, page), encoding="utf-8") as fh:
            blocks = re.findall(r"```bash\n(.*?)```", fh.read(), re.S)
        for block in blocks:
            for line in block.replace("\\\n", " ").splitlines():
                for command in shell_commands(line):
                    if command[0] == "vllm-load":
                        found.append((page, line.strip(), command[1:]))
    return found


def test_the_documented_commands_are_found_in_every_page_that_has_them():
    pages = {page for page, _, _ in documented_vllm_load_commands()}
    for page in (
        "README.md",
        "docs/running.md",
        "docs/reports.md",
        "docs/traces.md",
        "docs/tuning.md",
    ):
        assert page.replace("/", os.sep) in pages, f"no vllm-load command found in {page}"


def test_every_documented_vllm_load_command_parses(tmp_path, monkeypatch):
    """Each command the README and docs/*.md show is one `vllm-load --help` accepts: the
    subcommand exists, every option is spelled as the parser spells it, every value is one its
    type takes, and no unquoted `<` or `>` cuts it (`--slo ttft<=2s` is a redirection in bash).
    The files a command names for `-f` are made empty in a scratch directory first (the parser
    checks that a locustfile exists)."""
    from vllm_load.cli.main import build_parser, joined_negative_percents

    monkeypatch.chdir(tmp_path)
    parser = build_parser()
    wrong = []
    for page, line, args in documented_vllm_load_commands():
        redirections = [
            arg for arg in args if set(arg) <= set("<>&|0123456789") and set(arg) & set("<>")
        ]
        if redirections:
            wrong.append(
                f"{page}: {line}: bash reads {redirections[0]!r} as a redirection: quote it"
            )
            continue
        for flag, value in zip(args, args[1:]):
            if flag in ("-f", "--locustfile"):
                (tmp_path / value).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / value).touch()
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
                parser.parse_args(joined_negative_percents(args))
        except SystemExit:
            wrong.append(f"{page}: {line}: {errors.getvalue().strip()}")
    assert not wrong, "\n".join(wrong)
