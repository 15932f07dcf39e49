"""The live page in a real browser: it shows the channels and their counts, the members
and the partition-owner map of one, follows new events by itself, marks a crashed member
inactive and lists dead letters; a screenshot is kept in the test's tmp dir."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from channel_server.credentials import read_token
from tests.integration.conftest import publisher_for
from tests.integration.procs import Cluster, free_port

pytestmark = pytest.mark.browser
WAIT_MS = 10_000
PARTITIONS = 3


def publish(cluster: Cluster, channel: str, count: int) -> None:
    with publisher_for(cluster, channel, partitions=PARTITIONS) as pub:
        assert pub.publish([pub.event(i) for i in range(count)])["accepted"] == count


def cell(page: Any, channel: str, column: int) -> Any:
    """A cell of a channel's row in the channels table (0: its name)."""
    return page.locator(f'#channels tr[data-channel="{channel}"] td').nth(column)


ACCEPTED, BACKLOG, DEAD = 2, 6, 8


def test_the_page_follows_two_channels_live(cluster: Cluster, browser: Any, tmp_path) -> None:
    # Given a broker with two channels and a subscriber on orders that fails on PUB-3
    port = free_port()
    cluster.broker("orders", "audit", extra=("--memory", "--http", f"127.0.0.1:{port}"))
    sub = cluster.subscriber("orders", "s1", "--fault", "fail-on:PUB-3")
    publish(cluster, "orders", 5)
    publish(cluster, "audit", 2)
    token = read_token(cluster.tmp / "state")
    context = browser.new_context(http_credentials={"username": "owner", "password": token})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        # When the page opens on orders
        page.goto(f"http://127.0.0.1:{port}/#orders")
        # Then both channels are listed with their counts
        expect = _expect()
        expect(cell(page, "orders", ACCEPTED)).to_have_text("5", timeout=WAIT_MS)
        expect(cell(page, "audit", ACCEPTED)).to_have_text("2", timeout=WAIT_MS)
        expect(cell(page, "audit", BACKLOG)).to_have_text("2", timeout=WAIT_MS)
        # and the members and the partition-owner map of orders: s1 owns them all
        member = page.locator('[data-table="members"] tr[data-member="s1"]')
        expect(member).to_have_attribute("data-active", "true", timeout=WAIT_MS)
        owner = page.locator('[data-table="owners"] tr[data-owner="s1"] td').nth(1)
        expect(owner).to_have_text(str(PARTITIONS), timeout=WAIT_MS)
        # and the poison event in the dead letters, once its attempts are used up
        expect(page.locator("#dead-letters tbody td").first).to_have_text("PUB-3", timeout=WAIT_MS)
        expect(cell(page, "orders", DEAD)).to_have_text("1", timeout=WAIT_MS)
        page.screenshot(path=str(tmp_path / "monitor.png"), full_page=True)
        # When more events are published, the page follows by itself
        publish(cluster, "orders", 3)
        expect(cell(page, "orders", ACCEPTED)).to_have_text("8", timeout=WAIT_MS)
        # When the subscriber crashes, it turns inactive on the page within seconds
        sub.popen.send_signal(signal.SIGKILL)
        expect(member).to_have_attribute("data-active", "false", timeout=WAIT_MS)
        assert errors == []
    finally:
        context.close()
    assert (tmp_path / "monitor.png").stat().st_size > 0


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect
