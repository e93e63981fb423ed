"""Operators (`reach.*`) and the headless CLI command."""

from __future__ import annotations

from . import bake, chains, cli, convert, fix, ikfk, setup, solve, symmetry


def register() -> None:
    solve.register()
    bake.register()
    chains.register()
    fix.register()
    convert.register()
    ikfk.register()
    setup.register()
    symmetry.register()
    cli.register()


def unregister() -> None:
    cli.unregister()
    symmetry.unregister()
    setup.unregister()
    ikfk.unregister()
    convert.unregister()
    fix.unregister()
    chains.unregister()
    bake.unregister()
    solve.unregister()
