"""The live page in a real browser: it shows the channels and their counts, the members
and the partition-owner map of one, follows new events by itself, marks a crashed member
inactive; over HTTPS it lists dead letters and replays one (over plain HTTP it says why
not); a screenshot is kept in the test's tmp dir."""

from __future__ import annotations

import http.server
import json
import re
import signal
import ssl
import threading
import urllib.request
from typing import Any

import pytest

from channel_server.channel_stats import STATS_PARTITIONS
from channel_server.credentials import read_monitor_token
from channel_server.tls import CA_ENV, CERT_ENV, KEY_ENV
from tests.integration.conftest import publisher_for
from tests.integration.procs import Cluster, free_port, wait_until
from tests.integration.tls_certs import Certs

pytestmark = pytest.mark.browser
WAIT_MS = 10_000
PARTITIONS = 3


def publish(cluster: Cluster, channel: str, count: int) -> None:
    with publisher_for(cluster, channel, partitions=PARTITIONS) as pub:
        assert pub.publish([pub.event(i) for i in range(count)])["accepted"] == count


def owner_context(browser: Any, cluster: Cluster) -> Any:
    """A browser context with the owner's monitor credentials (Basic, the monitor token)
    that takes the HTTPS tests' certificates (their trustme CA is not the browser's)."""
    token = read_monitor_token(cluster.tmp / "state")
    credentials = {"username": "owner", "password": token}
    return browser.new_context(http_credentials=credentials, ignore_https_errors=True)


def watched_page(context: Any) -> tuple[Any, list[str]]:
    """A new page of ``context``, and the script errors it raises (a test expects none)."""
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return page, errors


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
    context = owner_context(browser, cluster)
    page, errors = watched_page(context)
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
        # with how many pushes carried its events (delivered ÷ pushes: how full they were)
        headers = page.locator('[data-table="members"] th').all_inner_texts()
        pushes = member.locator("td").nth(headers.index("pushes"))
        expect(pushes).to_have_text(re.compile(r"^[1-9][0-9]*$"), timeout=WAIT_MS)
        owner = page.locator('[data-table="owners"] tr[data-owner="s1"] td').nth(1)
        expect(owner).to_have_text(str(PARTITIONS), timeout=WAIT_MS)
        # and the poison event counted as a dead letter, once its attempts are used up,
        # which plain HTTP does not list (their payloads): the page says why
        expect(cell(page, "orders", DEAD)).to_have_text("1", timeout=WAIT_MS)
        expect(page.locator("#dead-note")).to_contain_text("HTTPS only", timeout=WAIT_MS)
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


def test_over_https_the_owner_replays_a_dead_letter_from_the_page(
    cluster: Cluster, browser: Any, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a TLS broker whose subscriber fails on PUB-3 (the clients take TLS too)
    port = tls_cluster(cluster, certs, monkeypatch, "fail-on:PUB-3")
    publish_over_tls(cluster, 5)
    context = owner_context(browser, cluster)
    page, errors = watched_page(context)
    try:
        # When the page opens on orders, the poison event is in the dead letters
        page.goto(f"https://127.0.0.1:{port}/#orders")
        expect = _expect()
        expect(page.locator("#dead-letters tbody td").first).to_have_text("PUB-3", timeout=WAIT_MS)
        expect(cell(page, "orders", DEAD)).to_have_text("1", timeout=WAIT_MS)
        # When the owner replays it from the page, it is queued again
        page.locator('#dead-letters button[data-replay$="/PUB-3"]').click()
        status = page.locator("#replay-status")
        expect(status).to_have_text("1 dead letter(s) of orders queued again", timeout=WAIT_MS)
        expect(cell(page, "orders", ACCEPTED)).to_have_text("6", timeout=WAIT_MS)
        assert errors == []
    finally:
        context.close()


def tls_cluster(cluster: Cluster, certs: Certs, monkeypatch: pytest.MonkeyPatch, fault: str) -> int:
    """A TLS broker with its monitor (HTTPS) and a subscriber with ``fault``; the clients
    started after it take TLS from the environment. Returns the monitor's port."""
    port = free_port()
    cluster.broker("orders", extra=("--memory", *certs.flags, "--http", f"127.0.0.1:{port}"))
    cluster.subscriber("orders", "s1", "--quiet", "--fault", fault, *certs.flags)
    monkeypatch.setenv(CERT_ENV, str(certs.cert))
    monkeypatch.setenv(KEY_ENV, str(certs.key))
    monkeypatch.setenv(CA_ENV, str(certs.ca))
    return port


def publish_over_tls(cluster: Cluster, count: int) -> None:
    """Published by a process of its own (this one never turns TLS on)."""
    argv = ["-m", "publisher", "publish", *cluster.ns, "--channel", "orders", "--id", "PUB"]
    done = cluster.run([*argv, "--count", str(count), "--partitions", "1"])
    assert done.returncode == 0, done.stderr


def test_a_group_of_many_partitions_says_it_lists_the_busiest(
    cluster: Cluster, browser: Any
) -> None:
    """One more partition than ``stats`` lists: the page says how many there are."""
    port = free_port()
    cluster.broker("orders", extra=("--memory", "--http", f"127.0.0.1:{port}"))
    cluster.subscriber("orders", "s1")
    many = STATS_PARTITIONS + 1
    with publisher_for(cluster, "orders", partitions=many) as pub:
        assert pub.publish([pub.event(i) for i in range(many)])["accepted"] == many
    context = owner_context(browser, cluster)
    page = context.new_page()
    try:
        page.goto(f"http://127.0.0.1:{port}/#orders")
        heading = page.locator(".group h3").nth(1)
        expected = f"partition owners (the {STATS_PARTITIONS} busiest of {many} partitions)"
        _expect()(heading).to_have_text(expected, timeout=WAIT_MS)
    finally:
        context.close()


def test_a_busy_broker_says_so_on_the_page(cluster: Cluster, browser: Any) -> None:
    """A broker busy at any CPU use (--busy-cpu 0.000001): once a publish closes its
    one-second load window, the channel's summary says its short pushes wait to fill."""
    port = free_port()
    cluster.broker(
        "orders", extra=("--memory", "--http", f"127.0.0.1:{port}", "--busy-cpu", "0.000001")
    )
    context = owner_context(browser, cluster)
    page = context.new_page()
    summary = page.locator("#detail-summary")
    sent = iter(range(1_000_000))
    try:
        page.goto(f"http://127.0.0.1:{port}/#orders")
        _expect()(summary).to_contain_text("accepted", timeout=WAIT_MS)
        assert "busy" not in summary.inner_text()  # no window closed yet
        with publisher_for(cluster, "orders") as pub:

            def says_busy() -> bool:
                assert pub.publish([pub.event(next(sent))])["accepted"] == 1
                return "busy: short pushes wait to fill (the broker used" in summary.inner_text()

            wait_until(says_busy, timeout_s=20.0, what="the page saying the broker is busy")
    finally:
        context.close()


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


EVIL_PAGE = """<!doctype html><html><body>
<form id="f" method="POST" action="{target}" enctype="text/plain">
<input name='{{"ids": ["x' value='"]}}'></form>
<script>
fetch("{target}", {{method: "POST", credentials: "include", mode: "no-cors",
  headers: {{"Content-Type": "text/plain"}}, body: "{{}}"}}).finally(() => {{
  fetch("{target}", {{method: "POST", credentials: "include",
    headers: {{"X-CSRF-Token": "guess", "Content-Type": "application/json"}}, body: "{{}}"}})
    .catch(() => null).finally(() => document.getElementById("f").submit());
}});
</script></body></html>"""


def test_another_sites_page_cannot_replay_dead_letters(
    cluster: Cluster, browser: Any, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a dead letter on orders (over HTTPS, where a replay is served), and the
    # owner's credentials in the browser
    port = tls_cluster(cluster, certs, monkeypatch, "fail-on:PUB-1")
    publish_over_tls(cluster, 1)
    token = read_monitor_token(cluster.tmp / "state")
    wait_until(lambda: _dead_letters(port, token, certs) == 1, what="a dead letter")
    target = f"https://127.0.0.1:{port}/api/channels/orders/dead-letters/replay"
    evil = _serve_once(EVIL_PAGE.format(target=target).encode())
    context = owner_context(browser, cluster)
    try:
        # When a page of another origin posts to the replay route (a form, a no-cors
        # fetch, and a fetch with a guessed token, which needs a preflight)
        page = context.new_page()
        page.goto(evil)
        page.wait_for_url(target, timeout=WAIT_MS)  # the fetches went first, then the form
        assert "X-CSRF-Token" in page.content()  # the form's POST arrived and was refused
        # Then nothing was replayed: the dead letter is still there
        assert _dead_letters(port, token, certs) == 1
    finally:
        context.close()


def _dead_letters(port: int, token: str, certs: Certs) -> int:
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/api/channels/orders",
        headers={"Authorization": f"Bearer {token}"},
    )
    context = ssl.create_default_context(cafile=str(certs.ca))
    with urllib.request.urlopen(request, timeout=5, context=context) as reply:
        return json.loads(reply.read())["dead_letters"]


def _serve_once(page: bytes) -> str:
    """Serve ``page`` from another origin (a port of its own) in a thread; its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://localhost:{server.server_address[1]}/"
