"""Kernel tuning: the hardware fingerprint, the SQLite record database, search spaces and searches (issue #4)."""
