"""gpufleet cli-reference: the command-line reference (docs/reference/cli.md), every command's help as argparse
prints it, made from the parser itself so the documentation cannot drift from the options (a test compares the two)."""

from __future__ import annotations

import argparse
import functools
import typing
from collections.abc import Iterator

# argparse wraps help to the terminal's width; the page must be the same wherever it is generated.
HELP_WIDTH = 100

HEADER = f"""# Command line

Every `gpufleet` command and sub-command with its help, as `--help` prints it (at {HELP_WIDTH} columns). This reference
is generated from the argument parser by `gpufleet cli-reference > docs/reference/cli.md`.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cli-reference", help="print the command-line reference (Markdown)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    print(render_reference(args.command_line), end="")
    return 0


def render_reference(command_line: argparse.ArgumentParser) -> str:
    """COMMAND_LINE: the whole `gpufleet` parser (gpufleet.cli hands it to every command as args.command_line; this
    module, a layer below, does not import it)."""
    return HEADER + "".join(_sections(command_line, summary=None))


def _sections(parser: argparse.ArgumentParser, summary: str | None) -> Iterator[str]:
    """The parser's section, then one per sub-command, depth first in the order `--help` lists them."""
    formatter_class = typing.cast(type[argparse.HelpFormatter], parser.formatter_class)
    parser.formatter_class = functools.partial(formatter_class, width=HELP_WIDTH)
    yield f"\n## {parser.prog}\n\n"
    if summary:
        yield f"{summary}\n\n"
    yield f"```text\n{parser.format_help()}```\n"
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help for choice in action._choices_actions}
            for name, subparser in action.choices.items():
                yield from _sections(subparser, summaries.get(name))
