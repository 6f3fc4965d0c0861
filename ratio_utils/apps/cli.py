"""What every command line shares: an error is one line on stderr naming what is wrong (the file, line, key or name
where the message has one), exit status 2; the traceback only with `--debug`.

    @one_line_errors(PROG)
    def main(argv: list[str] | None = None) -> int:
        parser = ...
        add_debug_flag(parser)
        ...

Bad input (a missing or unreadable file, a folder where a file is wanted, a YAML syntax error, a params or benchmark
problem, text that is not UTF-8: `OSError`, `ValueError` and `InputError`, `yaml.YAMLError`, and the command's own
`expected` types) exits with 2; any other exception is a bug, reported in one line as an internal error with exit
status 1 (rerun with `--debug` for the traceback); Ctrl-C exits with 130. Used by `ratio-evaluate`, `ratio-export`
and `ratio-mteb`; any app can adopt it. Reads and writes nothing itself.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence

import yaml

DEBUG_FLAG = "--debug"
INPUT_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, yaml.YAMLError)
EXIT_INPUT_ERROR, EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED = 2, 1, 130


def add_debug_flag(parser) -> None:
    """Give an argparse parser the `--debug` flag `one_line_errors` looks for (so `--help` lists it)."""
    parser.add_argument(DEBUG_FLAG, action="store_true", help="show the full traceback of an error.")


def add_allow_invalid_flag(parser) -> None:
    """Give a parser the `--allow-invalid` flag: score or export a benchmark whose files break a rule of the layout
    without the offending rows, which the command reports (`report_problems`) and records in its result file."""
    parser.add_argument("--allow-invalid", action="store_true",
                        help="leave out the benchmark rows that break a rule (a gold missing from its pool, a null or "
                             "shared query id, a repeated docid), counted on stderr and in the result file; by "
                             "default such a file is an error.")


def report_problems(prog: str, problems, recorded_in: str | None) -> None:
    """One warning line on stderr per benchmark problem left out under --allow-invalid (each a
    `dataset.benchmark.BenchmarkProblem`), naming the file and where the problems are recorded."""
    where = f"; recorded in {recorded_in}" if recorded_in else ""
    for problem in problems:
        print(f"{prog}: warning: {problem.file}: {problem.describe()}: {problem.dropped_rows} row(s) left out "
              f"(--allow-invalid){where}", file=sys.stderr)


def one_line(exc: BaseException) -> str:
    """The first line of an error's message, where the file and position are: a YAML error as
    `<file>, line L, column C: <problem>` (PyYAML spreads it over several lines)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}: YAML syntax error: {exc.problem}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text ({exc.reason} at byte {exc.start})"
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def one_line_errors(prog: str, expected: Sequence[type[BaseException]] = ()) -> Callable:
    """Decorate a command's `main(argv) -> int` so that an exception becomes one line on stderr, `<prog>: error: ...`,
    and an exit status (module docstring), unless `--debug` is in argv.

    prog: the command's name, first on the line.
    expected: the command's own error types that mean bad input (exit status 2), beside INPUT_ERRORS.
    """
    input_errors = INPUT_ERRORS + tuple(expected)

    def decorate(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
        @functools.wraps(main)
        def wrapper(argv: list[str] | None = None) -> int:
            args = list(sys.argv[1:] if argv is None else argv)
            if DEBUG_FLAG in args:
                return main(args)
            try:
                return main(args)
            except KeyboardInterrupt:
                print(f"{prog}: interrupted", file=sys.stderr)
                return EXIT_INTERRUPTED
            except input_errors as exc:
                print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
                return EXIT_INPUT_ERROR
            except Exception as exc:  # noqa: BLE001 - a bug: still one line, the traceback on request
                print(f"{prog}: internal error: {type(exc).__name__}: {one_line(exc)} (rerun with {DEBUG_FLAG} for "
                      "the traceback)", file=sys.stderr)
                return EXIT_INTERNAL_ERROR

        return wrapper

    return decorate
