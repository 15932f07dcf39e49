"""Every test's clients keep their state (publisher sequences, tokens) under pytest's tmp
dir, never in the user's own state dir."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from channel_server.statefile import STATE_DIR_ENV


@pytest.fixture(autouse=True, scope="session")
def _private_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STATE_DIR_ENV, str(tmp_path_factory.mktemp("state")))
        yield
