"""DeferredWrites: the acks, deletes and trims a store writes a moment later, in order."""

from __future__ import annotations

from channel_server.store.deferred import DeferredWrites


def test_take_returns_everything_once() -> None:
    deferred = DeferredWrites()
    assert not deferred.take()
    deferred.ack("c", "g", [1, 2])
    deferred.delete("c", [0])
    deferred.delete("c", [3])
    deferred.trim("c", 2)
    deferred.trim("c", 1)
    taken = deferred.take()
    assert taken.acks == [("c", "g", 1), ("c", "g", 2)]
    assert taken.deletes == {"c": [0, 3]}
    assert taken.trims == {"c": 3}
    assert not deferred.take()


def test_a_batch_put_back_goes_ahead_of_what_came_since() -> None:
    deferred = DeferredWrites()
    deferred.ack("c", "g", [1])
    deferred.delete("c", [0])
    failed = deferred.take()
    deferred.ack("c", "g", [2])
    deferred.delete("c", [1])
    deferred.trim("d", 4)
    deferred.put_back(failed)
    again = deferred.take()
    assert again.acks == [("c", "g", 1), ("c", "g", 2)]
    assert again.deletes == {"c": [0, 1]}
    assert again.trims == {"d": 4}


def test_deleting_counts_the_distinct_waiting_deletes_of_a_channel() -> None:
    deferred = DeferredWrites()
    deferred.delete("c", [0, 1])
    deferred.delete("c", [1, 2])
    deferred.delete("d", [0])
    assert (deferred.deleting("c"), deferred.deleting("d"), deferred.deleting("e")) == (3, 1, 0)
    deferred.take()
    assert deferred.deleting("c") == 0
