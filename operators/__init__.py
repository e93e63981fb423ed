"""Operators (`reach.*`) and the headless CLI command."""

from __future__ import annotations

from . import bake, chains, cli, convert, export, fix, ikfk, setup, solve, symmetry


def register() -> None:
    solve.register()
    bake.register()
    chains.register()
    fix.register()
    convert.register()
    ikfk.register()
    setup.register()
    symmetry.register()
    export.register()
    cli.register()


def unregister() -> None:
    cli.unregister()
    export.unregister()
    symmetry.unregister()
    setup.unregister()
    ikfk.unregister()
    convert.unregister()
    fix.unregister()
    chains.unregister()
    bake.unregister()
    solve.unregister()
