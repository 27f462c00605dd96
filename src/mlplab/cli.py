"""The ``mlplab`` command. Thin: every subcommand is a module of ``mlplab.commands`` with
``add_arguments(parser)`` and ``run(args) -> int`` that calls library functions."""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import shlex
import signal
import sys

from .errors import RunFailure
from .utils.interrupts import stop_signals

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "models": ("mlplab.commands.models", "list registered models with parameters and FLOPs"),
    "plan": ("mlplab.commands.plan", "plan (S, C) pairs / SW-MLP widths for a connection budget"),
    "demo": ("mlplab.commands.demo", "build models, check the effective wide MLP, print a table"),
    "train": ("mlplab.commands.train", "train a model from a config"),
    "sweep": ("mlplab.commands.sweep", "run a sweep of training runs"),
    "reproduce": ("mlplab.commands.reproduce", "run a published experiment by id"),
    "report": ("mlplab.commands.report", "aggregate runs of an experiment into figures and a report"),
    "finetune": ("mlplab.commands.finetune", "fine-tune or linear-probe a pretrained checkpoint"),
    "eval": ("mlplab.commands.eval", "evaluate a run or checkpoint on a dataset split (accuracy, loss, img/s)"),
    "convert": ("mlplab.commands.convert", "convert timm / Flax / Scaling-MLPs checkpoints to mlplab or timm"),
    "info": ("mlplab.commands.info", "show this machine's setup: torch, CPU, threads, compile, kernels, GPUs, data"),
    "pack": ("mlplab.commands.pack", "pack an image folder or dataset into streamable uint8 .npy shards"),
}


_DEBUG_HINT = " (MLPLAB_DEBUG=1 shows the traceback)"


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: torch's CPU allocator refusing (a RuntimeError, not a MemoryError): what the memory check did not foresee
_ALLOCATOR = re.compile(r"DefaultCPUAllocator: (?:can't|not enough memory)")
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)


def _explain_os_error(e: OSError, where_hint: str) -> str:
    path = e.filename or "a file"
    if e.errno in _FULL:
        limit = " (or raise the file-size limit, ulimit -f)" if e.errno == errno.EFBIG else ""
        return f"cannot write {path}: {e.strerror}; free space{limit}, then run the same command again"
    if e.errno in _DENIED:
        return f"cannot write {path}: {e.strerror}; fix its permissions or {where_hint}"
    if e.errno == errno.EISDIR:
        return f"{path} is a folder; give a file name"
    if e.errno in (errno.ENOTDIR, errno.EEXIST):
        return f"cannot use {path}: a file is in the way of a folder; {where_hint}"
    return f"cannot use {path}: {e.strerror or e}; free space, fix permissions or {where_hint}"


def explain(e: BaseException, command: str | None = None) -> tuple[int | None, str]:
    """The exit status and one-line message for an expected error (``mlplab.errors``): 2 for bad
    input, 1 for a runtime failure; ``(None, "")`` for anything else, which is a bug."""
    where = "choose another run.out_dir" if command in ("train", "finetune") else "choose another location"
    if isinstance(e, (ValueError, FileNotFoundError)):  # BadInput, BadType and the library's plain ValueErrors
        return 2, _ANSI.sub("", str(e))
    if isinstance(e, RunFailure):
        return 1, _ANSI.sub("", str(e))
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError" or _ALLOCATOR.search(str(e)):
        return 1, ("out of memory; lower run.batch_size or the model size, or use a machine with more "
                   "memory" + _DEBUG_HINT)
    if isinstance(e, OSError) and e.errno is not None:
        return 1, _explain_os_error(e, where) + _DEBUG_HINT
    if isinstance(e, (OverflowError, RecursionError)):
        return 2, f"a value is too large to handle ({e}); use a smaller one"
    return None, ""


def continue_command(command: str, argv: list[str], run_started: bool = True) -> str:
    """The command line that continues an interrupted ``command``: ``train``/``finetune`` with
    ``--resume`` (and without ``--overwrite``) once its run folder was written, else the same
    command; a sweep the same command (finished runs are skipped)."""
    args = [a for a in argv if a != "--overwrite"] if run_started else list(argv)
    if command in ("train", "finetune") and run_started and "--resume" not in args:
        args.append("--resume")
    return "mlplab " + " ".join(shlex.quote(a) for a in args)


def version() -> str:
    """``mlplab X.Y.Z (torch A.B.C, Python D.E)``: what ``mlplab --version`` prints."""
    import platform

    import torch

    from .version import __version__

    return f"mlplab {__version__} (torch {torch.__version__}, Python {platform.python_version()})"


#: what mlplab is, in one line (the top-level help; the package metadata says the same)
DESCRIPTION = ("mlplab: build, train, analyse and compare all-MLP vision models "
               "(MLP-Mixers, RP-Mixers, sparse and plain MLPs).")

_EPILOG = ("`mlplab COMMAND --help` shows a command's options; `mlplab info` this machine's setup; "
           "`mlplab train --list` the named configs and `mlplab train --list-keys` every config key.")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: the list of commands (each command's arguments: ``command_parser``)."""
    parser = argparse.ArgumentParser(prog="mlplab", description=DESCRIPTION, epilog=_EPILOG)
    parser.add_argument("--version", action="version", version=version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_) in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    return parser


def command_parser(name: str) -> argparse.ArgumentParser:
    module, help_ = COMMANDS[name]
    parser = argparse.ArgumentParser(prog=f"mlplab {name}", description=help_)
    importlib.import_module(module).add_arguments(parser)
    return parser


def dotted_options(argv: list[str], form: str | None) -> list[str]:
    """``--section.key=value`` and ``--section.key value`` (the timm / torchtitan / tyro habit) as
    the command's own override items, after its other arguments: ``section.key=value`` when
    ``form`` is ``"positional"``, ``--set section.key=value`` when it is ``"--set"``; unchanged
    for a command without overrides (``form`` None). No option of mlplab has a dot in its name."""
    if form is None:
        return list(argv)
    kept: list[str] = []
    items: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        key, eq, value = a[2:].partition("=")
        if a == "--" or not a.startswith("--") or "." not in key:
            kept.append(a)
            if a == "--":  # everything after it is positional
                kept += argv[i + 1:]
                break
            i += 1
            continue
        if not eq:
            if i + 1 == len(argv) or argv[i + 1].startswith("--"):
                raise ValueError(f"{a} needs a value: {a}=VALUE or {a} VALUE")
            value = argv[i + 1]
            i += 1
        items += [f"{key}={value}"] if form == "positional" else [form, f"{key}={value}"]
        i += 1
    return kept + items


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line as a namespace with ``command``. A command's arguments are parsed
    intermixed, so positional overrides may follow a flag (``train CONFIG --overwrite k=v``), which
    plain ``parse_args`` refuses; ``--section.key=value`` / ``--section.key value`` are overrides
    too (:func:`dotted_options`, where the command module's ``OVERRIDES`` says how it takes them)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:  # help, no command, or an unknown one (argparse says so)
        return build_parser().parse_args(argv)
    parser = command_parser(argv[0])
    try:
        rest = dotted_options(argv[1:], getattr(importlib.import_module(COMMANDS[argv[0]][0]), "OVERRIDES", None))
    except ValueError as e:
        parser.error(str(e))  # usage and one sentence, exit 2, as argparse's own errors
    args = parser.parse_intermixed_args(rest)
    args.command = argv[0]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return 2
    module = importlib.import_module(COMMANDS[args.command][0])
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        with stop_signals():
            return int(module.run(args) or 0)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: what was kept and how to go on, no traceback
        if os.environ.get("MLPLAB_DEBUG"):
            raise
        signum = getattr(e, "signum", None) or signal.SIGINT
        where = getattr(e, "message", "")  # empty: stopped before a run folder was written
        print(f"mlplab {args.command}: {where or 'interrupted'}; continue with "
              f"{continue_command(args.command, argv, bool(where))}", file=sys.stderr)
        return 128 + int(signum)
    except BrokenPipeError:  # the reader went away (`mlplab train --list-keys | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:
        status, message = explain(e, args.command)
        if status is None or os.environ.get("MLPLAB_DEBUG"):
            raise  # a bug (or MLPLAB_DEBUG=1): the traceback is what helps
        print(f"mlplab {args.command}: error: {message}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
