"""Sidebar panel, chain list and the viewport overlay."""

from __future__ import annotations


def register() -> None:
    pass


def unregister() -> None:
    pass
