"""Lowerings for the reduce kernel family."""
from __future__ import annotations

LOWERINGS = {}
