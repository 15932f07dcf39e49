"""Helper processes of ``scripts/bench.py`` (run by path, one process each)."""
