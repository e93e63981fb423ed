"""Operators (`reach.*`) and the headless CLI command."""

from __future__ import annotations

from . import bake, chains, cli, convert, fix, ikfk, solve


def register() -> None:
    solve.register()
    bake.register()
    chains.register()
    fix.register()
    convert.register()
    ikfk.register()
    cli.register()


def unregister() -> None:
    cli.unregister()
    ikfk.unregister()
    convert.unregister()
    fix.unregister()
    chains.unregister()
    bake.unregister()
    solve.unregister()
