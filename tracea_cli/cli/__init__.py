"""The `tracea` command: one module per command, composed here; errors become exit codes in one place (`_Group`)."""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
import traceback
from typing import NoReturn

import typer
import typer.core
from typer.core import TyperGroup

from tracea_cli import __version__
from tracea_cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, TraceaError

# typer >= 0.28 vendors click as typer._click; earlier versions use click itself.
click = getattr(typer.core, "click", None) or getattr(typer.core, "_click")


def _flags_show_no_type(display_type_rich):
    """typer >= 0.29 prints a flag as `--json <bool>`, as if it took a value: show flags without a type."""

    def display(self, ctx):
        return "" if getattr(self, "is_flag", False) and self.metavar is None else display_type_rich(self, ctx)

    return display


if hasattr(typer.core.TyperOption, "display_type_rich"):
    typer.core.TyperOption.display_type_rich = _flags_show_no_type(typer.core.TyperOption.display_type_rich)


class _Group(TyperGroup):
    """Runs a command and maps what escapes it to a sentence on stderr and an exit code.

    TraceaError -> its code (2 for usage), KeyboardInterrupt -> 130, anything else -> 1 with a pointer to --debug.
    Tracebacks only with --debug (or TRACEA_DEBUG=1). Works the same under typer's test runner.
    """

    def invoke(self, ctx: click.Context):  # noqa: D401
        restore = _terminate_like_interrupt()
        try:
            return super().invoke(ctx)
        except _Terminated:
            _say("terminated: finished work was saved.")
            raise typer.Exit(128 + signal.SIGTERM) from None
        except (typer.Exit, typer.Abort, click.ClickException):  # typer >= 0.28 has its own Exit/Abort
            raise
        except TraceaError as e:
            if _debug(ctx):
                traceback.print_exc()
            _say(f"error: {e.message}" + (f"\n  hint: {e.hint}" if e.hint else ""))
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            _say("interrupted: finished work was saved.")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except OSError as e:
            if e.errno not in _OUTPUT_ERRNOS:
                _internal_error(ctx, e)
            _quiet_stdout()
            if isinstance(e, BrokenPipeError):  # the reader went away (`| head`): nothing to say
                raise typer.Exit(128 + signal.SIGPIPE) from None
            _say(f"error: could not write the output: {e.strerror}.\n  hint: Check where the output goes (a full disk "
                 "or a file system that refuses writes).")
            raise typer.Exit(EXIT_FAILED) from None
        except Exception as e:  # a bug: say so plainly
            _internal_error(ctx, e)
        finally:
            restore()


#: errors of writing the output that are the destination's, not ours: full disk, quota, I/O error, closed pipe
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EPIPE, errno.EFBIG}


def _internal_error(ctx: click.Context, e: BaseException) -> NoReturn:
    if _debug(ctx):
        traceback.print_exc()
    _say(f"error: internal error ({type(e).__name__}: {e}).\n  hint: run again with --debug and report it.")
    raise typer.Exit(EXIT_FAILED) from None


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush does not fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (a test runner's stdout)
        pass


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so that it unwinds as for Ctrl-C: workers stopped, the cache closed."""


def _terminate_like_interrupt():
    """Make SIGTERM unwind like Ctrl-C while a command runs (only from the main thread, and only where nobody else
    installed a handler). Returns the function that puts the previous handler back."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return lambda: None

    def terminated(signum, frame):
        raise _Terminated()

    signal.signal(signal.SIGTERM, terminated)
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _debug(ctx: click.Context) -> bool:
    from tracea_cli.config import _flag

    root = ctx.find_root()
    return bool((root.obj or {}).get("debug")) or _flag(os.environ, "TRACEA_DEBUG")


def _say(text: str) -> None:
    print(text, file=sys.stderr)


app = typer.Typer(
    cls=_Group,
    name="tracea",
    help="Diagnose the machine, tune kernels, benchmark them against vendor libraries, export the winners.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"tracea {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
) -> None:
    ctx.obj = {"debug": debug}


def _register() -> None:
    # Each command module is light at import: heavy libraries load inside the commands.
    from tracea_cli.cli.commands import register_all

    register_all(app)


_register()


def main() -> None:
    app()
