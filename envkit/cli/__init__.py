"""Command-line entry point: one parser; each command's module is imported only when it runs.

``COMMANDS`` maps every command to the module of envkit.cli that registers it (its
``register(subparsers)`` adds the subcommand and sets ``func`` to a ``cmd_<command>``
handler; ``--config`` and the build options come from envkit.cli.options). ``main``
imports only the module of the command on the command line, so ``envkit render``
loads nothing that ``envkit launch`` or ``envkit report`` needs; ``envkit --help`` and
an unknown command load them all, to list every command. Heavy imports (docker,
matplotlib, jsonschema) happen inside the handlers, which keeps ``envkit --help``
working without the optional extras.
One rule for every command line: envkit's options may stand anywhere, and a command
that runs a recipe (experiment, run, launch) takes the recipe's arguments after '--'
(envkit.cli.options.add_recipe_args), so `--dry-run` anywhere before '--' is envkit's,
before the command name too. A command without a dry run refuses --dry-run in one line
naming those that have one (``dry_run_commands``: README's list is checked against it).
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import signal
import sys


def _interrupted_while_loading(signum, frame) -> None:
    sys.stderr.write("envkit: interrupted\n")
    raise SystemExit(130)


def is_the_program() -> bool:
    """Whether this process is envkit itself: its console script, or python -m envkit."""
    program = (getattr(sys, "argv", None) or [""])[0]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.basename(program) == "envkit" or os.path.abspath(program) == os.path.join(here, "__main__.py")


# Ctrl-C while envkit's own modules load (before main's handler is in place) is one line too, not a traceback;
# only in envkit's own process: a program or test that imports envkit.cli keeps its own SIGINT handling. Only
# where Python's own handler is in place: a SIGINT ignored from the start (a shell's background job, nohup) stays
# ignored, as Python itself leaves it.
if is_the_program() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    try:
        signal.signal(signal.SIGINT, _interrupted_while_loading)
    except ValueError:  # not the main thread: signals are not ours to set
        pass

# envkit's own process runs one command and ends. Python's cyclic collector, tuned for long-lived programs, took
# about 15 ms of CPU of a cold render's 115 (benchmarks/bench_render.py): a young collection every 700 new objects
# while some 200 modules load, each older collection walking all they made, and at exit a last collection of every
# object left, which the process's end frees anyway. In envkit's own process only, a young collection comes every
# GC_THRESHOLD new objects (cyclic garbage is still collected: memory stays bounded, by some megabytes more), and
# what is left at exit is frozen, out of that last collection, by an exit handler registered as envkit.cli loads:
# the last to run of envkit's and its libraries' (a temporary folder's removal, a log's flush). Objects are still
# freed as their modules are cleared; only cycles are left to the process's end, as Python leaves any object alive
# at exit. A program or test that imports envkit.cli keeps Python's settings.
GC_THRESHOLD = 50_000
if is_the_program():
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    atexit.register(gc.freeze)

import argparse  # noqa: E402 - after the handler, which covers these imports too
import importlib  # noqa: E402

from envkit import __version__  # noqa: E402
from envkit.errors import EnvkitError  # noqa: E402
from envkit.support.cache import nothing_kept  # noqa: E402

# command -> module of envkit.cli that registers it (tests/cli/test_cli_commands.py checks both ways).
COMMANDS = {
    "init": "init",
    "targets": "targets",
    "matrix": "matrix",
    "render": "render",
    "build": "images",
    "run": "images",
    "push": "images",
    "save": "images",
    "load": "images",
    "prune": "images",
    "doctor": "host",
    "experiment": "experiment",
    "report": "report",
    "compare": "report",
    "demo": "report",
    "lock": "lock",
    "venv": "venv",
    "verify": "verify",
    "diff": "verify",
    "reproduce": "reproduce",
    "launch": "launch",
    "notebook": "notebook",
}


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints the whole usage on error; our users get one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def _check_value(self, action: argparse.Action, value: object) -> None:
        # One message on every Python: 3.12.8 and 3.13.1 stopped quoting the choices (Debian 13's 3.13.5 prints
        # "choose from init, targets"; 3.11 "choose from 'init', 'targets'"); envkit prints them unquoted.
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(map(str, action.choices))
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from {choices})")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with ``command``'s module registered, or every module when None."""
    parser = _OneLineParser(
        prog="envkit",
        description="Render, build, run and compare pinned deep-learning images for cpu, cuda and tpu-vm.",
        epilog="envkit's options may stand anywhere on the command line; experiment, run and launch take the "
        "recipe's arguments after '--' (envkit experiment cpu-mnist --dry-run -- --epochs 1). --dry-run, "
        "where a command has it (its --help says so), prints exactly what would run and builds, pushes, writes "
        "or runs nothing; make's DRY_RUN=1 does the same for every make target. A mistyped option is answered "
        "with the command's closest one (--pyhton: did you mean --python?).",
    )
    parser.add_argument("--version", action="version", version=f"envkit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineParser)
    subparsers.required = True
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(f"envkit.cli.{name}").register(subparsers)
    return parser


DRY_RUN = "--dry-run"


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The commands registered in ``parser``, by name."""
    (subparsers,) = (action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return subparsers.choices


def dry_run_commands(parser: argparse.ArgumentParser) -> list[str]:
    """The commands registered in ``parser`` that take --dry-run."""
    return sorted(
        name
        for name, command in _commands(parser).items()
        if any(DRY_RUN in action.option_strings for action in command._actions)
    )


def _close_options(parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> list[str]:
    """For each unknown --option, the command's option it is a typo of (--pyhton: --python), where one is close."""
    import difflib

    options = [option for action in _commands(parser)[command]._actions for option in action.option_strings]
    words = (word.split("=", 1)[0] for word in unknown if word.startswith("--"))
    return list(dict.fromkeys(match for word in words for match in difflib.get_close_matches(word, options, 1, 0.8)))


def _as_given(words: list[str], argv: list[str]) -> list[str]:
    """``words`` (some of ``argv``'s, each as often as it is there) in ``argv``'s order."""
    left = list(words)
    ordered = []
    for word in argv:
        if word in left:
            left.remove(word)
            ordered.append(word)
    return ordered


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The arguments, with everything after the first '--' as the recipe's (for the commands that run one)."""
    from envkit.cli.options import RECIPE_ARGS_HINT

    split = argv.index("--") if "--" in argv else len(argv)
    args, unknown = parser.parse_known_args(argv[:split])
    takes_recipe_args = hasattr(args, "recipe_args")
    if takes_recipe_args:
        # Words before '--' that are not envkit's, in the order given: argparse's own order differs between
        # Python releases (3.13.5 puts a stray value before the option it followed).
        unknown = _as_given([*args.recipe_args, *unknown], argv[:split])
        args.recipe_args = argv[split + 1 :]
    if DRY_RUN in unknown:
        # Before the command name argparse leaves it to the top-level parser, which has none: it is the command's.
        if not hasattr(args, "dry_run"):
            having = ", ".join(dry_run_commands(build_parser()))
            parser.error(f"{args.command} has no {DRY_RUN}; the commands that have one: {having}")
        args.dry_run = True
        unknown = [word for word in unknown if word != DRY_RUN]
    if unknown:
        close = _close_options(parser, args.command, unknown)
        hint = f"; did you mean {' '.join(close)}?" if close else ""
        recipe = " (else {}: {})" if close else "; {}: {}"
        if takes_recipe_args:
            import shlex  # here, where a stray word is answered: a remembered render imports it nowhere else (issue 42)

            known = list(argv[:split])
            for word in unknown:
                known.remove(word)
            hint += recipe.format(RECIPE_ARGS_HINT, shlex.join(["envkit", *known, "--", *unknown]))
        parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    if split < len(argv) and not takes_recipe_args:
        parser.error(f"'--' passes arguments to a recipe, and {args.command} runs none (experiment, run and launch do)")
    return args


def _command(argv: list[str]) -> str | None:
    """The command word: the first argument that is not an option (top-level options take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # What a command prints may hold a name the file system gave as undecodable bytes (a lone surrogate): it is
    # printed as its escape, never a UnicodeEncodeError, whatever stream stands in for stdout or stderr.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    try:
        try:
            code = _run(argv)
        finally:
            # Here, not at exit (after a command, --help, --version or an error alike): a reader that has gone
            # (envkit doctor | head -1) is seen below, where at exit Python reports it and exits 120.
            sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader of stdout stopped reading: end quietly, as a tool killed by SIGPIPE does. Python's
        # advice: point stdout at devnull, so the flush at exit cannot fail a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def _run(argv: list[str]) -> int:
    """The command's exit status; an error or a Ctrl-C as one line."""
    try:
        if signal.getsignal(signal.SIGINT) is _interrupted_while_loading:
            # From here a Ctrl-C is a KeyboardInterrupt again: what a command was doing gets undone (a venv being
            # replaced comes back), then the line below.
            signal.signal(signal.SIGINT, signal.default_int_handler)
        # Parsing imports the command's module: most of a run's first 0.1 s, when Ctrl-C is likeliest.
        args = parse(build_parser(_command(argv)), argv)
        with nothing_kept(getattr(args, "dry_run", False)):  # a dry run writes nothing, in the cache neither
            return int(args.func(args) or 0)
    except EnvkitError as exc:
        print(f"envkit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("envkit: interrupted", file=sys.stderr)
        return 130
