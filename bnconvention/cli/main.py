"""Entry point of the ``bnconvention`` CLI.

The commands are a table, :data:`bnconvention.cli.commands.COMMANDS` (name -> module path, one-line summary,
extra). Each command module exposes ``register(subparsers)``, which adds its parser and sets ``func`` to a callable
``(argparse.Namespace) -> int``. Only the module of the command on the command line is imported (``bnconvention
validate ...`` imports the validate command's module and no other, ``bnconvention --help`` none): the others are
listed from the table. So a command module imports its machinery at its top, torch included where the command
needs it, and the torch-free commands stay torch-free.

Exit codes (a documented contract, see docs/cli.md): 0 success / no errors, 1 errors found or the operation
failed, 2 unreadable input or bad usage, 130 interrupted.

Every exception that reaches the entry point becomes one line on stderr, ``bnconvention: <kind>: <message>``:
the types in :data:`ERROR_TABLE` by their row; a missing optional dependency (torch, scipy, ...) as the
``bnconvention[...]`` extra to install (:mod:`bnconvention.extras`); anything else is a bug of ours or of code we
called, reported as ``bnconvention: internal error: TypeName: message (rerun with --traceback and report it)``
with exit 1. ``--traceback`` (or ``BNC_TRACEBACK=1``) prints the full traceback before the line.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Collection, Sequence

from bnconvention import errors
from bnconvention._version import __version__
from bnconvention.cli.commands import COMMANDS
from bnconvention.extras import missing_dependency, needs_extra
from bnconvention.formats.text import elide

MAX_MESSAGE = 4000  # characters of the one error line (messages elide long values themselves: formats.text.elide)
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# Ordered: the first matching type decides the exit code and the prefix of the one-line message.
ERROR_TABLE: list[tuple[type[BaseException], int, str]] = [
    (errors.UsageError, EXIT_USAGE, "usage error"),
    (errors.ArchitectureConfigError, EXIT_USAGE, "architecture refused"),
    (errors.PublishedCellsNotFoundError, EXIT_USAGE, "no published cells"),
    (errors.ReproductionInputError, EXIT_USAGE, "cannot reproduce"),
    (errors.UntrustedInputError, EXIT_USAGE, "unreadable input"),
    (errors.AuditSpecError, EXIT_USAGE, "invalid audit spec"),
    (errors.PreregistrationError, EXIT_USAGE, "preregistration"),
    (errors.FactoryNotAllowedError, EXIT_USAGE, "factory not allowed"),
    (errors.FactoryImportError, EXIT_USAGE, "cannot load factory"),
    (errors.FactoryArgumentError, EXIT_USAGE, "bad factory arguments"),
    (errors.FactoryCallError, EXIT_FAILED, "model factory failed"),
    (errors.MissingDependencyError, EXIT_FAILED, "missing dependency"),
    (errors.DeviceUnavailableError, EXIT_USAGE, "device unavailable"),
    (errors.RecordError, EXIT_FAILED, "invalid record"),
    (errors.DigestMismatchError, EXIT_FAILED, "digest mismatch"),
    (errors.SignatureError, EXIT_FAILED, "signature"),
    (errors.WeightsChangedError, EXIT_FAILED, "weights changed"),
    (errors.HubNetworkError, EXIT_FAILED, "network error"),
    (errors.QuantizationError, EXIT_FAILED, "quantization refused"),
    (errors.OutputInUseError, EXIT_FAILED, "output in use"),
    (errors.ImpossibleStatisticsError, EXIT_FAILED, "impossible statistics"),
    (errors.BnConventionError, EXIT_FAILED, "error"),
    (FileNotFoundError, EXIT_USAGE, "file not found"),
    (PermissionError, EXIT_USAGE, "permission denied"),
    (OSError, EXIT_FAILED, "I/O error"),
]


def build_parser(load: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with the commands named in ``load`` (default: all) registered by their modules and the others
    by their name and summary alone (so their modules are not imported)."""
    parser = argparse.ArgumentParser(
        prog="bnconvention",
        description="Declare, stamp, validate and audit how a BatchNorm network's running statistics were fitted.",
    )
    parser.add_argument("--version", action="version", version=f"bnconvention {__version__}")
    parser.add_argument("--traceback", action="store_true",
                        help="show the full traceback on errors (also BNC_TRACEBACK=1)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {command.module for name, command in COMMANDS.items() if load is None or name in load}
    for name, command in COMMANDS.items():
        if name in subparsers.choices:  # registered with another command of its module (sign, verify)
            continue
        if command.module in modules:
            importlib.import_module(command.module).register(subparsers)
        else:
            subparsers.add_parser(name, help=command.summary)
    for name, command in COMMANDS.items():
        if command.extra and command.module in modules:
            needs_extra(subparsers.choices[name], command.extra)
    return parser


def _command_named(argv: Sequence[str]) -> str | None:
    """The command on the command line: the first argument that is not an option (the top-level options take no
    value), when it is one of :data:`COMMANDS`."""
    for position, arg in enumerate(argv):
        if arg == "--":
            arg = argv[position + 1] if position + 1 < len(argv) else ""
        elif arg.startswith("-"):
            continue
        return arg if arg in COMMANDS else None
    return None


def _classify(exc: BaseException) -> tuple[int, str, str]:
    """``(exit code, kind, message)`` of the one line that reports ``exc``."""
    message = elide(exc, MAX_MESSAGE)  # a value echoed whole from untrusted input cannot make a megabyte line
    for exc_type, code, label in ERROR_TABLE:
        if isinstance(exc, exc_type):
            return code, label, message or type(exc).__name__
    detail = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return EXIT_FAILED, "internal error", f"{detail} (rerun with --traceback and report it)"


def _report(exc: BaseException, *, extra: str | None, command: str, show_traceback: bool) -> int:
    if show_traceback:
        traceback.print_exception(exc)
    if isinstance(exc, ModuleNotFoundError):
        exc = missing_dependency(exc, extra=extra, command=command) or exc
    code, label, message = _classify(exc)
    print(f"bnconvention: {label}: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    name = _command_named(argv)
    try:
        parser = build_parser(load=() if name is None else (name,))
    except ModuleNotFoundError as exc:  # the command's module imports a dependency of an extra that is missing
        show_traceback = "--traceback" in argv or bool(os.environ.get("BNC_TRACEBACK"))
        return _report(exc, extra=COMMANDS[name].extra if name else None, command=f"bnconvention {name}",
                       show_traceback=show_traceback)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    show_traceback = bool(args.traceback or os.environ.get("BNC_TRACEBACK"))
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("bnconvention: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - every exception becomes one line (see the module docstring)
        return _report(exc, extra=getattr(args, "extra", None), show_traceback=show_traceback,
                       command=getattr(args, "extra_command", None) or f"bnconvention {args.command}")
