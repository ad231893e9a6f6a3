"""argparse's private API (checked with Python 3.11.7; argparse has no public way to list a
parser's options)."""

from __future__ import annotations

import argparse


def parser_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's actions (`parser._actions`), one per `add_argument` (--help first), in the
    order added: the live objects, so setting `.default` or `.help` on one changes the parser."""
    return parser._actions


def subcommand_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parsers of a parser's subcommands, by name: the `choices` of the action that
    `add_subparsers` added (found among `parser_actions`; empty without subcommands)."""
    for action in parser_actions(parser):
        if isinstance(action.choices, dict):
            return dict(action.choices)
    return {}


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """`argparse.ArgumentDefaultsHelpFormatter` with its per-option hook under a public name.

    argparse asks `_get_help_string(action)` for each option's help text (before %-expansion);
    ArgumentDefaultsHelpFormatter's appends " (default: %(default)s)". Subclasses override
    `help_string` instead, and call it on super() for the default-appending text.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        return self.help_string(action)

    def help_string(self, action: argparse.Action) -> str:
        """The help text of one option, `%(default)s` and the like not yet expanded."""
        return super()._get_help_string(action) or ""
