"""Shared parts of the bench scripts (``scripts/bench*.py``).

Modules: ``procs`` (child processes and their clean-up), ``service`` (broker and bench
subscriber processes, events, publishing, waiting for acks), ``report`` (running
measurements, medians, targets, the table and the JSON report). Helper processes, run by
path: ``sub.py`` (a bench subscriber), ``raw_server.py`` (the raw Pyro5 ceiling).
"""
