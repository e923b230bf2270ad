"""Lowerings for the layout kernel family."""
from __future__ import annotations

LOWERINGS = {}
