"""Lowerings for the conv kernel family."""
from __future__ import annotations

LOWERINGS = {}
