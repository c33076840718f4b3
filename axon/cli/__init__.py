"""The `axon` command line. Each sub-command lives in its own module of this package and exposes
NAME, HELP, add_arguments(parser) and run(args) -> exit status; this module only dispatches and
turns AxonError into one line on stderr."""
from __future__ import annotations

import argparse
import importlib
import sys

from axon.errors import AxonError

# Module names under axon.cli, in the order `axon --help` lists them.
COMMANDS = ["demo", "list", "verify", "variants", "simulate", "optimize", "bench", "cache"]


def _load_commands():
    modules = []
    for name in COMMANDS:
        try:
            modules.append(importlib.import_module(f"axon.cli.{name}"))
        except ModuleNotFoundError as err:
            if err.name != f"axon.cli.{name}":
                raise
    return modules


def build_parser() -> argparse.ArgumentParser:
    from axon import __version__

    parser = argparse.ArgumentParser(prog="axon", description="Axon: a synthesizing superoptimizer for tensor programs.")
    parser.add_argument("--version", action="version", version=f"axon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _load_commands():
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "_run"):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except AxonError as err:
        print(f"axon: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("axon: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head`: not an error of ours
        sys.stderr.close()
        return 0
