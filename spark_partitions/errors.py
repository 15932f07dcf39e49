"""Errors the CLI turns into a one-line reason and a non-zero exit, never a traceback."""

from __future__ import annotations


class PlanError(Exception):
    """Something about the request or the input makes a plan impossible."""


class InputError(PlanError):
    """The input is missing, unreadable or of an unknown format or shape."""


class EngineUnavailable(PlanError):
    """The requested engine cannot run here (for example pyspark is not installed)."""
