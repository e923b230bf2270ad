"""Pruning: `prune` (the -O2 passes, then magnitude, N:M or channel pruning) and the per-layer sensitivity report."""
from ortx.pruning.prune_model import PruneResult, prune

__all__ = ["PruneResult", "prune"]
