"""Operators (`reach.*`) and the headless CLI command."""

from __future__ import annotations

from . import cli, solve


def register() -> None:
    solve.register()
    cli.register()


def unregister() -> None:
    cli.unregister()
    solve.unregister()
