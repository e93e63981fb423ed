"""Operators (`reach.*`) and the headless CLI command."""

from __future__ import annotations

from . import bake, chains, cli, solve


def register() -> None:
    solve.register()
    bake.register()
    chains.register()
    cli.register()


def unregister() -> None:
    cli.unregister()
    chains.unregister()
    bake.unregister()
    solve.unregister()
