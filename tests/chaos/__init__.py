"""Jepsen-style randomized fault suite: a seeded nemesis against real processes, a pure
checker of the README's guarantees, and a runner (``python -m tests.chaos.run``)."""
