"""Commands with one subcommand per op, generated from the registry: `tracea tune OP`, `tracea bench OP`,
`tracea export OP`. Each op's options come from its declaration (ops/base.Option); the command adds its own.

Subcommands are built on first use (`OpGroup.get_command`), so `tracea --help` loads no op. An unknown op, an
option the op does not have, or one of another op are each one sentence naming what there is (exit 2).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from tracea_cli.errors import UsageError

from typer.core import TyperOption

try:  # typer >= 0.28 vendors click as typer._click
    from typer._click.exceptions import NoSuchOption
except ImportError:
    from click.exceptions import NoSuchOption

ClickCommand = Context = Any  # click's types, vendored or not: only named in annotations here


@dataclass(frozen=True)
class Flag:
    """One option of a command (not of an op): its keyword, type, default, flag and help."""

    name: str
    annotation: Any
    default: Any
    flag: str
    help: str
    metavar: str | None = None

    def parameter(self) -> inspect.Parameter:
        option = typer.Option(self.default, self.flag, help=self.help, metavar=self.metavar)
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=self.annotation)


def op_flags(op: Any, *, repeat_sizes: bool = False) -> list[Flag]:
    """The op's options as flags. Unset ones arrive as None (the op applies its defaults); with `repeat_sizes` a size
    may be given several times (several shapes) and arrives as a list."""
    out = []
    for o in op.options:
        default = ("on" if o.default else "off") if o.type is bool else o.default
        shown = "" if o.default is None or o.default_from else f" (default: {default})"
        if repeat_sizes and o.size:
            out.append(Flag(o.name, List[o.type], [], o.flag, f"{o.help} Repeat for several shapes."))
        elif o.type is bool:  # a switch: --bias / --no-bias
            out.append(Flag(o.name, Optional[bool], None, f"{o.flag}/--no-{o.flag[2:]}", o.help + shown))
        else:
            out.append(Flag(o.name, Optional[o.type], None, o.flag, o.help + shown))
    return out


def build_command(name: str, help: str, flags: list[Flag], body: Callable[..., None], *, op: Any) -> ClickCommand:
    """A click command named `name` taking `flags`, calling `body(**values)`."""
    def command(**values: Any) -> None:
        body(**values)

    params = [f.parameter() for f in flags]
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = help
    app = typer.Typer(add_completion=False)
    cls = type("OpCommand", (OpCommand,), {"op": op})
    app.command(name, cls=cls, context_settings={"help_option_names": ["-h", "--help"]})(command)
    return typer.main.get_command(app)


class OpCommand(TyperCommand):
    """An op's subcommand: an unknown option is one sentence naming the op's options (and the op it belongs to)."""

    op: Any = None

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except NoSuchOption as e:
            raise UsageError(_no_such_option(self.op, e.option_name, ctx), None) from None


def _no_such_option(op: Any, flag: str, ctx: Context) -> str:
    from tracea_cli.ops.registry import get_op, op_names

    own = [o.flag for o in op.options]
    command = ctx.parent.info_name if ctx.parent is not None else op.name
    general = [p.opts[0] for p in ctx.command.params if isinstance(p, TyperOption) and p.opts[0] not in own
               and p.opts[0] != "--help"]
    elsewhere = [name for name in op_names() if name != op.name and flag in (o.flag for o in get_op(name).options)]
    where = f" ({flag} is an option of {', '.join(elsewhere)})" if elsewhere else ""
    return (f"{op.name} has no option {flag}{where}: its options are {', '.join(own)}, and `tracea {command}`'s own "
            f"{', '.join(general)}.")


class OpGroup(TyperGroup):
    """A group whose subcommands are the registry's ops, each built by `make(op)` when first asked for."""

    make: Callable[[Any], ClickCommand] = None  # type: ignore[assignment]

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except NoSuchOption as e:
            from tracea_cli.ops.registry import get_op, op_names

            owners = [name for name in op_names() if e.option_name in (o.flag for o in get_op(name).options)]
            hint = (f"{e.option_name} is an option of {', '.join(owners)}: put it after the op's name, e.g. "
                    f"`tracea {ctx.info_name} {owners[0]} {e.option_name} ...`.") if owners else None
            raise UsageError(f"`tracea {ctx.info_name}` has no option {e.option_name}.", hint) from None

    def list_commands(self, ctx: Context) -> list[str]:
        from tracea_cli.ops.registry import op_names

        return [*super().list_commands(ctx), *op_names()]

    def get_command(self, ctx: Context, name: str) -> ClickCommand | None:
        found = super().get_command(ctx, name)
        if found is not None:
            return found
        from tracea_cli.ops.registry import get_op

        return type(self).make(get_op(name))  # an unknown name: a UsageError naming the ops there are


def op_group(make: Callable[[Any], ClickCommand]) -> type[OpGroup]:
    return type("Group", (OpGroup,), {"make": staticmethod(make)})


def group_options_after_op(ctx: Context, given: dict[str, Any], defaults: dict[str, Any]) -> None:
    """With an op named, the group's own options must not be set before it (they would be ignored)."""
    early = [name for name, value in given.items() if value != defaults.get(name)]
    if ctx.invoked_subcommand is not None and early:
        flags = ", ".join("--" + n.replace("_", "-") for n in early)
        raise UsageError(f"{flags} came before the operation {ctx.invoked_subcommand!r}, where they mean nothing.",
                         f"Put them after it: `tracea {ctx.info_name} {ctx.invoked_subcommand} ... {flags.split(', ')[0]} ...`.")


def op_values(op: Any, values: dict[str, Any]) -> dict[str, Any]:
    """The op's options among a command's values (unset ones left out: the op applies its defaults)."""
    names = {o.name for o in op.options}
    return {k: v for k, v in values.items() if k in names and v is not None}
