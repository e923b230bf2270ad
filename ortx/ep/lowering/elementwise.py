"""Lowerings for the elementwise kernel family."""
from __future__ import annotations

LOWERINGS = {}
