"""Operators (`reach.*`) and the headless CLI command."""

from __future__ import annotations

from . import bake, cli, solve


def register() -> None:
    solve.register()
    bake.register()
    cli.register()


def unregister() -> None:
    cli.unregister()
    bake.unregister()
    solve.unregister()
