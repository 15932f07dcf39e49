import pytest

# Detailed assertion messages from the shared invariant checks, as in the test modules.
pytest.register_assert_rewrite("tests.unit.group_checks")
