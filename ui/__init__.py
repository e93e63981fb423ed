"""Sidebar panel, chain list and the viewport overlay."""

from __future__ import annotations

from . import overlay, panel


def register() -> None:
    panel.register()
    overlay.register()


def unregister() -> None:
    overlay.unregister()
    panel.unregister()
