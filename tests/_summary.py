"""Counters that tests fill and the terminal summary prints (see conftest.py)."""
import collections

CONFORMANCE = collections.Counter()
