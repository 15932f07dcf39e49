"""The publisher's state file keeps an interrupted put whole, a bytes payload too."""

from __future__ import annotations

from pathlib import Path

import pytest

from publisher.state import PublisherState


@pytest.mark.parametrize("payload", [b"\x00raw\xff", "text", {"a": [1, "b"]}, None])
def test_a_journaled_put_comes_back_as_it_was_sent(tmp_path: Path, payload: object) -> None:
    """JSON has no bytes: journaling a put of them raised TypeError (session 34's
    newcomer); a rerun of its unit of work must send the same bytes again."""
    event = {"id": "w-3", "publisher_id": "w", "partition": 0, "timestamp": 1.0}
    PublisherState(tmp_path, "w").journal_put("news", event | {"payload": payload}, 4, "step")
    pending = PublisherState(tmp_path, "w").pending_put()
    assert pending == {"topic": "news", "event": event | {"payload": payload}, "key": "step"}
    assert PublisherState(tmp_path, "w").next_seq("news") == 4
