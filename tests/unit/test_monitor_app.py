"""The monitor's routes, its HTTP authentication and its flags, without sockets."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator

import pytest

from channel_server import users as um
from channel_server.errors import InvalidArgument, NotAuthorized
from channel_server.monitor.app import MonitorApp
from channel_server.monitor.flags import http_from_args
from channel_server.monitor.http_auth import NO_CREDENTIAL, authenticate
from channel_server.monitor.settings import BadAddress, HttpConfig, parse_address
from channel_server.users import owner
from tests.unit.monitor_fakes import MONITOR_TOKEN, TOKEN, FakeChannel, basic, handle


@pytest.fixture(autouse=True)
def cheap_hashes() -> Iterator[None]:
    um.set_test_parameters()
    yield
    um.set_test_parameters(False)


@pytest.fixture
def app() -> MonitorApp:
    """An HTTPS monitor (a plain-HTTP one refuses the dead-letter routes to everyone)."""
    channels = FakeChannel("orders"), FakeChannel("orders-eu"), FakeChannel("hr")
    return MonitorApp(handle(*channels), scheme="https")


def body(app: MonitorApp, path: str, user: um.User | None = None) -> tuple[int, object]:
    response = app.respond(path, user or owner())
    return response.status, json.loads(response.body)


# -- authentication ----------------------------------------------------------------------
def test_the_monitor_token_as_basic_password_or_bearer_is_the_owner() -> None:
    access = handle().access
    assert authenticate(access, basic("owner", MONITOR_TOKEN)).name == "owner"
    assert authenticate(access, f"Bearer {MONITOR_TOKEN}").name == "owner"
    assert authenticate(access, f"bearer   {MONITOR_TOKEN} ").name == "owner"


@pytest.mark.parametrize("header", [basic("owner", TOKEN), f"Bearer {TOKEN}"])
def test_the_local_token_itself_is_refused_saying_what_to_send(header: str) -> None:
    """Over plain HTTP it would reach whoever holds the monitor's port while the broker
    is away (an attacker's fake monitor read it, and was then the owner everywhere)."""
    with pytest.raises(NotAuthorized, match=r"the local token is not taken over HTTP.*monitor"):
        authenticate(handle().access, header)


def test_a_users_file_user_with_its_password() -> None:
    user = authenticate(handle().access, basic("alice", "alice-pw"))
    assert user.name == "alice" and not user.allows_any("hr")


@pytest.mark.parametrize(
    "header, reason",
    [
        (None, NO_CREDENTIAL),
        ("", NO_CREDENTIAL),
        (basic("owner", "nope"), "wrong credential for user 'owner'"),
        (basic("alice", "carol-pw"), "wrong credential for user 'alice'"),
        ("Bearer nope", "wrong credential for user 'owner'"),
        ("Basic !!!", "a malformed credential"),
        ("Basic " + "b3duZXI=", "a malformed credential"),  # "owner": no colon
        ("Digest x", "a malformed credential"),
        ("Bearer " + "x" * 5000, "a malformed credential"),
    ],
)
def test_missing_wrong_or_malformed_credentials_are_refused(header, reason) -> None:
    with pytest.raises(NotAuthorized) as refused:
        authenticate(handle().access, header)
    assert refused.value.reason == reason
    if header is None:
        assert "monitor-token" in reason  # where a scraper finds what to send


# -- routes --------------------------------------------------------------------------------
def test_api_channels_lists_the_channels_the_user_may_see(app: MonitorApp) -> None:
    status, rows = body(app, "/api/channels")
    assert status == 200
    assert [r["channel"] for r in rows] == ["hr", "orders", "orders-eu"]
    alice = authenticate(handle().access, basic("alice", "alice-pw"))
    assert [r["channel"] for r in body(app, "/api/channels?x=1", alice)[1]] == [
        "orders",
        "orders-eu",
    ]


def test_api_channel_is_its_status_entry(app: MonitorApp) -> None:
    status, entry = body(app, "/api/channels/orders")
    assert status == 200
    assert entry == dict(FakeChannel("orders").stats(), broker="b1")
    assert body(app, "/api/channels/nope")[0] == 404
    alice = authenticate(handle().access, basic("alice", "alice-pw"))
    assert body(app, "/api/channels/hr", alice)[0] == 404  # as if it did not exist


def test_dead_letters_need_admin_on_the_channel(app: MonitorApp) -> None:
    status, letters = body(app, "/api/channels/orders/dead-letters")
    assert status == 200 and letters[0]["id"] == "<b>x</b>"
    carol = authenticate(handle().access, basic("carol", "carol-pw"))
    assert body(app, "/api/channels/orders/dead-letters", carol)[0] == 200
    alice = authenticate(handle().access, basic("alice", "alice-pw"))
    status, refusal = body(app, "/api/channels/orders/dead-letters", alice)
    assert status == 403 and "admin on channel 'orders'" in refusal["error"]


def test_metrics_show_only_the_channels_the_user_may_see(app: MonitorApp) -> None:
    alice = authenticate(handle().access, basic("alice", "alice-pw"))
    text = app.respond("/metrics", alice).body.decode()
    assert 'pubsub_channel_accepted_events_total{channel="orders"} 12.0' in text
    assert 'channel="hr"' not in text


def test_the_page_and_its_files_are_served_and_nothing_else(app: MonitorApp) -> None:
    page = app.respond("/", owner())
    assert page.status == 200 and page.content_type.startswith("text/html")
    assert b'src="static/app.js"' in page.body
    assert app.respond("/static/app.js", owner()).content_type.startswith("text/javascript")
    assert app.respond("/static/style.css", owner()).status == 200
    for path in ("/static/../server.py", "/static/x.js", "/nope", "/api", "/api/channels/a/b/c"):
        assert app.respond(path, owner()).status == 404, path


def test_the_page_never_writes_data_as_html() -> None:
    script = MonitorApp(handle()).respond("/static/app.js", owner()).body
    assert b"innerHTML" not in script and b"outerHTML" not in script
    assert b"insertAdjacentHTML" not in script and b"document.write" not in script


# -- addresses and flags -------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, parsed",
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("[::1]:0", ("::1", 0)),
        ("localhost:9", ("localhost", 9)),
    ],
)
def test_parse_address(text: str, parsed: tuple[str, int]) -> None:
    assert parse_address(text) == parsed


@pytest.mark.parametrize("text", ["8080", ":8080", "host:", "host:x", "h:70000", "a:b:80"])
def test_parse_address_refuses(text: str) -> None:
    with pytest.raises(BadAddress):
        parse_address(text)


def flags(http: str | None, insecure: bool = False) -> argparse.Namespace:
    return argparse.Namespace(
        http=http, insecure=insecure, http_max_connections=4, http_max_waiting=8, http_timeout=2.0
    )


def test_http_is_off_by_default_and_loopback_needs_nothing() -> None:
    assert http_from_args(flags(None)) is None
    assert http_from_args(flags("127.0.0.1:0")) == HttpConfig(
        "127.0.0.1", 0, max_connections=4, max_waiting=8, request_timeout_s=2.0
    )


def test_a_non_loopback_http_address_needs_insecure() -> None:
    with pytest.raises(InvalidArgument) as refused:
        http_from_args(flags("0.0.0.0:9100"))
    assert refused.value.argument == "--http" and "--insecure" in refused.value.reason
    assert http_from_args(flags("0.0.0.0:9100", insecure=True)).host == "0.0.0.0"


def test_with_the_brokers_certificate_the_monitor_is_https_anywhere() -> None:
    args = flags("0.0.0.0:9100")
    args.tls_cert, args.tls_key = "/etc/b/cert.pem", "/etc/b/key.pem"
    config = http_from_args(args)
    assert config is not None and config.scheme == "https"
    assert (config.host, config.cert, config.key) == ("0.0.0.0", args.tls_cert, args.tls_key)
    assert HttpConfig().scheme == "http"


# -- the page's replay POST --------------------------------------------------------------
HOST = "127.0.0.1:9100"


def post(
    app: MonitorApp, path: str, payload: bytes = b"{}", user: um.User | None = None, **headers: str
) -> tuple[int, object]:
    sent = {"X-CSRF-Token": app.csrf_token, "Host": HOST, "Origin": f"https://{HOST}"} | {
        k.replace("_", "-"): v for k, v in headers.items()
    }
    response = app.respond_post(path, user or owner(), sent, payload)
    return response.status, json.loads(response.body)


REPLAY = "/api/channels/orders/dead-letters/replay"


def test_the_session_gives_the_user_and_the_token_a_post_needs(app: MonitorApp) -> None:
    status, session = body(app, "/api/session")
    assert status == 200 and session == {"user": "owner", "csrf": app.csrf_token}
    assert len(app.csrf_token) >= 32


def test_replay_all_or_named_dead_letters() -> None:
    orders = FakeChannel("orders")
    app = MonitorApp(handle(orders), frozenset({HOST}), "https")
    assert post(app, REPLAY) == (200, {"replayed": 1})
    assert post(app, REPLAY, b'{"ids": ["PUB-3", "P/PUB-4"]}') == (200, {"replayed": 2})
    assert orders.replayed == [None, ["PUB-3", "P/PUB-4"]]


@pytest.mark.parametrize(
    "headers, reason",
    [
        ({"X_CSRF_Token": ""}, "X-CSRF-Token"),
        ({"X_CSRF_Token": "guessed"}, "X-CSRF-Token"),
        ({"Origin": "https://evil.example"}, "not of this server"),
        ({"Origin": f"http://{HOST}"}, "not of this server"),
        ({"Host": "rebound.example:9100", "Origin": "https://rebound.example:9100"}, "not to this"),
    ],
)
def test_a_post_from_another_sites_page_is_refused(headers: dict[str, str], reason: str) -> None:
    orders = FakeChannel("orders")
    app = MonitorApp(handle(orders), frozenset({HOST}), "https")
    status, reply = post(app, REPLAY, **headers)
    assert status == 403 and reason in str(reply)
    assert orders.replayed == []


def test_replay_needs_admin_on_the_channel_and_a_well_formed_body() -> None:
    orders = FakeChannel("orders")
    app = MonitorApp(handle(orders, FakeChannel("hr")), frozenset({HOST}), "https")
    alice = authenticate(handle().access, basic("alice", "alice-pw"))
    assert post(app, REPLAY, user=alice)[0] == 403
    assert post(app, "/api/channels/hr/dead-letters/replay", user=alice)[0] == 404
    assert post(app, REPLAY, b"not json")[0] == 400
    assert post(app, REPLAY, b'{"ids": [1, 2]}')[0] == 400
    assert post(app, REPLAY, b'{"ids": "PUB-3"}')[0] == 400
    assert post(app, "/api/channels/orders/nothing")[0] == 404
    assert orders.replayed == []


def test_a_plain_http_monitor_serves_no_dead_letters_and_no_replay() -> None:
    """Over plain HTTP the credential asking is whoever's held the port while the broker
    was away: session 33's attacker read another user's dead letters, payloads and all, and
    replayed them with a scraper's monitor token. Counts and metrics are still served."""
    orders = FakeChannel("orders")
    app = MonitorApp(handle(orders), frozenset({HOST}))
    status, refusal = body(app, "/api/channels/orders/dead-letters")
    assert status == 403 and "served over HTTPS only" in refusal["error"]
    sent = {"X-CSRF-Token": app.csrf_token, "Host": HOST, "Origin": f"http://{HOST}"}
    replay = app.respond_post(REPLAY, owner(), sent, b"{}")
    assert replay.status == 403 and b"HTTPS only" in replay.body
    assert orders.replayed == []
    assert body(app, "/api/channels/orders")[0] == 200
