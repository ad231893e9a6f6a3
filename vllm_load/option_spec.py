"""Declaring options once: a dataclass field that is also a command-line option.

`option(default, help, ...)` makes a field whose metadata holds its `OptionSpec` (flag, parsing,
check, web-UI treatment); the helpers here read one field's option: its flag, its `dest`, its
default as a parser holds it, its value from what a parser (or Locust's web UI) gave, its help.
`vllm_load.settings` declares the run's options with it and puts them on parsers.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field
from typing import Any, Callable

from .user_values import SettingsError


@dataclass(frozen=True)
class Rule:
    """A check on an option's value: `holds(value)`, else the option `must` ... ."""

    must: str
    holds: Callable[[Any], bool]


AT_LEAST_1 = Rule("be at least 1", lambda v: v >= 1)
AT_LEAST_1_OR_UNSET = Rule("be at least 1", lambda v: v is None or v >= 1)
NOT_NEGATIVE = Rule("not be negative", lambda v: v >= 0)
POSITIVE = Rule("be positive", lambda v: v > 0)


@dataclass(frozen=True)
class OptionSpec:
    """How one `Settings` field is given on a command line and in Locust's web UI.

    The field's name, type and default are the option's; its flag is `--field-name` unless
    `flag` says otherwise. A bool field is a flag: given, it sets the field to the opposite of
    its default (`--no-stream` sets `stream` False)."""

    help: str
    flag: str = ""
    parse: Callable[[Any], Any] | None = None  # a value as given (text, from the web UI) -> field
    rule: Rule | None = None
    choices: tuple[str, ...] = ()
    # the default as written on a command line (and sent by Locust's web UI), when not the
    # field's default: a list option's must be text, which the UI hands back as typed
    shown_default: str | None = None
    repeatable: bool = False  # given once per item (`--meta k=v --meta k2=v2`)
    # the value as its help shows it (a repeatable option's item: default KEY=VALUE)
    metavar: str = ""
    web_ui: bool = True
    secret: bool = False


def option(default: Any, help: str, **spec: Any) -> Any:
    """A `Settings` field that is also an option (see `OptionSpec`)."""
    meta = {"option": OptionSpec(help, **spec)}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta, repr=not spec.get("secret", False))


@dataclass(frozen=True)
class InputOption:
    """An option that feeds a `Settings` field without being one (`--meta-file` fills `meta`)."""

    flag: str
    help: str

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")


META_FILE = InputOption(
    "--meta-file",
    "YAML file of run metadata (hardware, GPUs, image digest, model revision); --meta overrides",
)
#: the web UI form's key field: Locust's page shows every option it shows with its value, so a
#: secret option (--api-key) is kept out of the form and this, always empty there, stands in
FORM_API_KEY = InputOption(
    "--form-api-key",
    "the web UI form's API key, for the host typed in the form (empty: the --api-key or "
    "$OPENAI_API_KEY the UI was started with, which no page shows)",
)


def flag_of(f: Field, spec: OptionSpec) -> str:
    return spec.flag or "--" + f.name.replace("_", "-")


def dest_of(f: Field, spec: OptionSpec) -> str:
    """The parsed options' attribute: the flag's name (`--no-stream` -> `no_stream`)."""
    return flag_of(f, spec)[2:].replace("-", "_")


def field_default(f: Field) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def is_flag(f: Field) -> bool:
    return f.type == "bool"


def command_line_default(f: Field, spec: OptionSpec) -> Any:
    """The option's default as its parser holds it (a flag: not given)."""
    if is_flag(f):
        return False
    if spec.repeatable:
        return []
    return spec.shown_default if spec.shown_default is not None else field_default(f)


TYPES: dict[str, Callable[[Any], Any]] = {"int": int, "float": float, "str": str}
TYPE_WORDS = {"int": "a whole number", "float": "a number", "str": "text"}


def value_of(f: Field, spec: OptionSpec, given: Any) -> Any:
    """The field's value from what the options hold (text from Locust's web UI included).
    An empty value is "not set" (the field's default) only where the default is empty too; for
    an option with a default of its own (`--levels ''`) it is an unset variable or a cleared
    form field, refused rather than silently read as the default."""
    if given is None:
        return field_default(f)
    if given == "":
        default = command_line_default(f, spec)
        if not is_flag(f) and default not in (None, "", [], {}):
            raise SettingsError(
                f"{flag_of(f, spec)} is empty: give a value, or leave the option out for its "
                f"default ({default})"
            )
        return field_default(f)
    if is_flag(f):
        given_flag = given if isinstance(given, bool) else str(given).lower() in ("1", "true")
        return (not field_default(f)) if given_flag else field_default(f)
    if spec.parse is not None:
        return spec.parse(given)
    try:
        return TYPES[str(f.type)](given)
    except (TypeError, ValueError):
        raise SettingsError(
            f"{flag_of(f, spec)} must be {TYPE_WORDS[str(f.type)]}, got {given!r}"
        ) from None


def help_text(f: Field, spec: OptionSpec, default: Any) -> str:
    """The option's help, with its default said unless the help says it or there is none."""
    if is_flag(f) or default in (None, "", [], {}) or "(default" in spec.help:
        return spec.help
    shown = f"{default:g}" if isinstance(default, float) else str(default)
    return f"{spec.help} (default {shown})"
