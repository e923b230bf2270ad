"""Lowerings for the pool kernel family."""
from __future__ import annotations

LOWERINGS = {}
