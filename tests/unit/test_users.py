"""Users, grants and the users file (channel_server.users) and its ``users`` CLI."""

from __future__ import annotations

import json
import logging
import re
import stat
from pathlib import Path

import argon2
import pytest
import yaml

from channel_client import cli_common as cc
from channel_server import users as um
from channel_server.errors import InvalidArgument
from channel_server.users import (
    Action,
    Grant,
    User,
    UsersFile,
    hash_password,
    owner,
    owns_publisher_id,
    parse_grant,
    publisher_id_owner,
    verify_password,
)
from channel_server.users_cli import add_users_command, run_users

PUB_SUB = frozenset({Action.PUBLISH, Action.SUBSCRIBE})


@pytest.fixture(autouse=True)
def cheap_hashes():
    um.set_test_parameters()
    yield
    um.set_test_parameters(False)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- passwords ---------------------------------------------------------------------------
def test_hash_verify_round_trip_and_wrong_password() -> None:
    hashed = hash_password("s3cret")
    assert hashed.startswith("$argon2id$") and "s3cret" not in hashed
    assert verify_password(hashed, "s3cret")
    assert not verify_password(hashed, "s3cret ")
    assert not verify_password(hashed, "")
    assert hash_password("s3cret") != hashed  # salted


@pytest.mark.parametrize("bad", ["", "s3cret", "$argon2id$junk", "$argon2id$é"])
def test_verify_malformed_hash_is_false_not_an_error(bad: str) -> None:
    assert verify_password(bad, "s3cret") is False


def test_default_parameters_stay_strong() -> None:
    um.set_test_parameters(False)
    params = argon2.extract_parameters(hash_password("x"))
    assert params.type is argon2.Type.ID
    assert (params.time_cost, params.memory_cost) == (3, 65536)


# -- grants and users --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pattern", "channel", "matches"),
    [
        ("orders*", "orders", True),
        ("orders*", "orders.eu", True),
        ("orders*", "my-orders", False),
        ("orders*", "Orders", False),  # case-sensitive on every platform
        ("orders", "orders.eu", False),  # the whole name
        ("*", "anything", True),
        ("q?", "q1", True),
        ("q?", "q12", False),
        ("[ab]x", "bx", True),
    ],
)
def test_grant_pattern_is_a_whole_name_glob(pattern: str, channel: str, matches: bool) -> None:
    user = User("u", (Grant(pattern, frozenset({Action.PUBLISH})),))
    assert user.allows(Action.PUBLISH, channel) is matches
    assert user.allows_any(channel) is matches


def test_actions_are_separate_and_admin_implies_the_others() -> None:
    publisher = User("p", (Grant("orders*", frozenset({Action.PUBLISH})),))
    assert publisher.allows(Action.PUBLISH, "orders")
    assert not publisher.allows(Action.SUBSCRIBE, "orders")
    assert not publisher.allows(Action.ADMIN, "orders")
    admin = User("a", (Grant("reports", frozenset({Action.ADMIN})),))
    assert all(admin.allows(action, "reports") for action in Action)
    assert not admin.allows(Action.PUBLISH, "orders")
    assert not admin.allows_any("orders")


def test_grants_add_up() -> None:
    user = User("u", (Grant("a*", frozenset({Action.PUBLISH})), Grant("ab", PUB_SUB)))
    assert user.allows(Action.SUBSCRIBE, "ab")
    assert not user.allows(Action.SUBSCRIBE, "ac")
    assert User("nobody", ()).allows_any("ab") is False


def test_a_decision_is_worked_out_once_and_answered_the_same_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every call asks for a permission: the grants' globs are matched once per action and
    channel, and the answer stays what they say."""
    matched: list[tuple[str, str]] = []

    def counting(channel: str, pattern: str) -> bool:
        matched.append((channel, pattern))
        return channel.startswith("orders")

    monkeypatch.setattr(um, "fnmatchcase", counting)
    user = User("u", (Grant("orders*", frozenset({Action.PUBLISH})),))
    for _ in range(3):
        assert user.allows(Action.PUBLISH, "orders")
        assert not user.allows(Action.PUBLISH, "reports")
        assert not user.allows(Action.SUBSCRIBE, "orders")  # no grant has the action
    assert matched == [("orders", "orders*"), ("reports", "orders*")]


def test_a_user_keeps_a_bounded_number_of_decisions() -> None:
    """A caller asking about ever new channel names cannot grow a user without end."""
    user = User("u", (Grant("c*", frozenset({Action.PUBLISH})),))
    for n in range(3 * um.DECISIONS_KEPT):
        assert user.allows(Action.PUBLISH, f"c{n}")
        assert not user.allows(Action.PUBLISH, f"d{n}")
        assert len(user._decisions) <= um.DECISIONS_KEPT
    assert user == User("u", user.grants)  # what it answered is not part of the user


def test_owner_may_do_everything_and_is_the_broker() -> None:
    me = owner()
    assert me.name == um.OWNER and me.broker
    assert all(me.allows(action, "any.channel") for action in Action)


@pytest.mark.parametrize(
    ("pattern", "actions", "reason"),
    [
        ("", PUB_SUB, "bad channel pattern"),
        ("has space", PUB_SUB, "bad channel pattern"),
        ("a/b", PUB_SUB, "bad channel pattern"),
        ("x" * 129, PUB_SUB, "bad channel pattern"),
        ("orders", frozenset(), "no actions"),
        ("orders", frozenset({"pubish"}), "unknown action 'pubish'"),
    ],
)
def test_bad_grant_refused(pattern: str, actions: frozenset, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        Grant(pattern, actions)


@pytest.mark.parametrize(
    ("text", "pattern", "actions"),
    [
        ("publish,subscribe:orders*", "orders*", PUB_SUB),
        ("admin:*", "*", {Action.ADMIN}),
        ("subscribe, publish:x", "x", PUB_SUB),
        ("publish,publish:x", "x", {Action.PUBLISH}),
    ],
)
def test_parse_grant(text: str, pattern: str, actions: set[Action]) -> None:
    grant = parse_grant(text)
    assert grant == Grant(pattern, frozenset(actions))
    assert parse_grant(str(grant)) == grant


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("orders*", "not ACTIONS:PATTERN"),
        (":orders", "no actions"),
        ("publish:", "bad channel pattern"),
        ("pub:orders", "unknown action 'pub'"),
        ("publish:a:b", "bad channel pattern"),
    ],
)
def test_parse_grant_refuses(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as info:
        parse_grant(text)
    assert "\n" not in str(info.value)


# -- the users file ----------------------------------------------------------------------
def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "users.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def one_user(entry: object, name: str = "alice") -> dict:
    return {"users": {name: entry}}


GOOD_ALLOW = [{"channels": "orders*", "actions": ["publish", "subscribe"]}]


def test_load_and_authenticate(tmp_path: Path) -> None:
    entry = {"password": hash_password("pw"), "allow": GOOD_ALLOW}
    users = UsersFile.load(write(tmp_path, {"users": {"alice": entry, "bob": entry}}))
    assert users.names() == ["alice", "bob"]
    alice = users.authenticate("alice", "pw")
    assert alice == User("alice", (Grant("orders*", PUB_SUB),))
    assert not alice.broker
    assert users.authenticate("alice", "wrong") is None
    assert users.authenticate("carol", "pw") is None


def test_unknown_user_still_costs_a_verification(tmp_path: Path, monkeypatch) -> None:
    users = UsersFile.load(write(tmp_path, one_user({"password": hash_password("pw")})))
    checked: list[str] = []
    real = um.verify_password
    monkeypatch.setattr(um, "verify_password", lambda h, p: checked.append(h) or real(h, p))
    assert users.authenticate("nobody", "pw") is None
    assert len(checked) == 1 and checked[0].startswith("$argon2id$")


def test_load_allows_no_users_and_no_grants(tmp_path: Path) -> None:
    assert UsersFile.load(write(tmp_path, "users:\n")).names() == []
    users = UsersFile.load(write(tmp_path, one_user({"password": hash_password("pw")})))
    assert users.authenticate("alice", "pw") == User("alice", ())


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ("users: [", "not valid YAML at line"),
        ("", "top level: not a mapping"),
        ("- alice\n", "top level: not a mapping"),
        ({"users": {}, "groups": {}}, r"top level: unknown key\(s\) groups"),
        ({"users": ["alice"]}, "users: not a mapping"),
        (one_user({"password": "HASH"}, "bad name"), "users.bad name: bad user name"),
        (one_user({"password": "HASH"}, "a" * 65), "bad user name"),
        (one_user({"password": "HASH"}, 7), "users.7: bad user name"),
        (one_user({"password": "HASH"}, "owner"), "users.owner: user name 'owner' is reserved"),
        (one_user(["x"]), "users.alice: not a mapping"),
        (one_user({"allow": GOOD_ALLOW}), r"users.alice: missing key\(s\) password"),
        (one_user({"password": "HASH", "admin": True}), r"users.alice: unknown key\(s\) admin"),
        (one_user({"password": "s3cret"}), "users.alice.password: .* never clear text"),
        (one_user({"password": "$argon2id$junk"}), "users.alice.password: .*malformed"),
        (one_user({"password": "HASH", "allow": {"channels": "x"}}), r"alice\.allow: not a list"),
        (
            one_user({"password": "HASH", "allow": [{"channels": "x", "actions": ["pubish"]}]}),
            r"users\.alice\.allow\[0\]: unknown action 'pubish'",
        ),
        (
            one_user({"password": "HASH", "allow": [*GOOD_ALLOW, {"channels": "", "actions": []}]}),
            r"users\.alice\.allow\[1\]: bad channel pattern ''",
        ),
        (
            one_user({"password": "HASH", "allow": [{"channels": "a b", "actions": ["admin"]}]}),
            r"allow\[0\]: bad channel pattern 'a b'",
        ),
        (
            one_user({"password": "HASH", "allow": [{"channels": "x", "actions": []}]}),
            r"allow\[0\]: no actions",
        ),
        (
            one_user({"password": "HASH", "allow": [{"channels": "x", "actions": "admin"}]}),
            r"allow\[0\]: not a list",
        ),
        (
            one_user({"password": "HASH", "allow": [{"channels": "x"}]}),
            r"allow\[0\]: missing key\(s\) actions",
        ),
    ],
)
def test_bad_users_file_refused_with_reason(tmp_path: Path, data: object, reason: str) -> None:
    if not isinstance(data, str):
        data = yaml.safe_load(yaml.safe_dump(data).replace("HASH", hash_password("pw")))
    path = write(tmp_path, data)
    with pytest.raises(InvalidArgument) as info:
        UsersFile.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message
    assert re.search(reason, message), message


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_a_users_file_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    """Whoever can write it can grant themselves every right."""
    path = write(tmp_path, one_user({"password": hash_password("pw")}))
    path.chmod(mode)
    with pytest.raises(InvalidArgument, match="other users may write to this users file"):
        UsersFile.load(path)
    path.chmod(0o644)
    assert UsersFile.load(path).names() == ["alice"]


def test_a_users_file_others_may_swap_or_link_is_refused(tmp_path: Path) -> None:
    """Its path was checked, then read again: a user who could write its directory swapped
    in a file granting itself admin between the two (session 33's attacker probe, 2 wins in
    3 runs). Now the directory must be closed to others (or sticky, as /tmp is), a link is
    not followed, and the checks are of the file read."""
    directory = tmp_path / "shared"
    directory.mkdir()
    path = write(directory, one_user({"password": hash_password("pw")}))
    directory.chmod(0o777)
    with pytest.raises(InvalidArgument, match="other users may replace the users file"):
        UsersFile.load(path)
    directory.chmod(0o777 | stat.S_ISVTX)  # others cannot rename what is not theirs
    assert UsersFile.load(path).names() == ["alice"]
    directory.chmod(0o700)
    link = directory / "link.yaml"
    link.symlink_to(path)
    with pytest.raises(InvalidArgument, match="cannot read users file"):
        UsersFile.load(link)


def test_unreadable_file_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="cannot read users file"):
        UsersFile.load(tmp_path / "missing.yaml")


def test_save_is_private_atomic_and_reloads_equal(tmp_path: Path) -> None:
    users = UsersFile()
    # '!' never occurs in an argon2 hash (base64 and '$'), so a random salt cannot hold it
    users.add("alice", "pw!", [Grant("orders*", PUB_SUB), parse_grant("admin:reports")])
    users.add("bob", "pw2", [])
    path = tmp_path / "users.yaml"
    path.write_text("old")
    path.chmod(0o644)
    users.save(path)
    assert mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["users.yaml"]  # no temporary file left
    assert "pw!" not in yaml.safe_load(path.read_text())["users"]["alice"]["password"]
    again = UsersFile.load(path)
    assert again == users
    assert again.users()[0].grants == (Grant("orders*", PUB_SUB), parse_grant("admin:reports"))
    assert again.authenticate("bob", "pw2") == User("bob", ())


def test_save_warns_about_a_shared_directory(tmp_path: Path, caplog) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger=um.__name__):
        UsersFile().save(shared / "users.yaml")
    assert "group/world writable" in caplog.text
    caplog.clear()
    private = tmp_path / "private"
    private.mkdir()
    private.chmod(0o700)
    with caplog.at_level(logging.WARNING, logger=um.__name__):
        UsersFile().save(private / "users.yaml")
    assert "group/world writable" not in caplog.text


def test_add_remove_rules() -> None:
    users = UsersFile()
    users.add("alice", "pw", [])
    with pytest.raises(InvalidArgument, match="already exists"):
        users.add("alice", "other", [])
    users.add("alice", "other", [Grant("x", PUB_SUB)], replace=True)
    assert users.authenticate("alice", "other") == User("alice", (Grant("x", PUB_SUB),))
    for name, password, reason in [("a b", "pw", "bad user name"), ("ok", "", "empty")]:
        with pytest.raises(InvalidArgument, match=reason):
            users.add(name, password, [])
    users.remove("alice")
    assert users.names() == []
    with pytest.raises(InvalidArgument, match="no such user"):
        users.remove("alice")


# -- the CLI -----------------------------------------------------------------------------
def cli(*argv: str) -> int:
    parser = cc.Parser(prog="channel_server")
    add_users_command(parser.add_subparsers(dest="command", required=True))
    return run_users(parser.parse_args(["users", *argv]))


@pytest.fixture
def users_file(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("NEW_PW", "s3cret")
    return tmp_path / "users.yaml"


def test_cli_add_list_remove(users_file: Path, capsys) -> None:
    f = str(users_file)
    grants = ["--allow", "publish,subscribe:orders*", "--allow", "admin:reports"]
    assert cli("add", "alice", "--file", f, *grants, "--password-env", "NEW_PW") == 0
    assert mode(users_file) == 0o600
    assert "s3cret" not in users_file.read_text()
    alice = UsersFile.load(users_file).authenticate("alice", "s3cret")
    assert alice == User("alice", (Grant("orders*", PUB_SUB), parse_grant("admin:reports")))
    assert cli("add", "bob", "--file", f, "--allow", "subscribe:*", "--password-env", "NEW_PW") == 0
    capsys.readouterr()
    assert cli("list", "--file", f) == 0
    out = capsys.readouterr().out
    assert out == "alice publish,subscribe:orders* admin:reports\nbob subscribe:*\n"
    assert cli("list", "--file", f, "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed[1] == {"name": "bob", "allow": [{"channels": "*", "actions": ["subscribe"]}]}
    assert "argon2" not in json.dumps(listed)
    assert cli("remove", "bob", "--file", f) == 0
    assert UsersFile.load(users_file).names() == ["alice"]


def test_cli_replace_and_password_sources(users_file: Path, tmp_path: Path, monkeypatch) -> None:
    f = str(users_file)
    secret = tmp_path / "pw.txt"
    secret.write_text("from-file\nignored\n")
    assert (
        cli("add", "alice", "--file", f, "--allow", "admin:*", "--password-file", str(secret)) == 0
    )
    assert UsersFile.load(users_file).authenticate("alice", "from-file")
    answers = iter(["typed", "typed"])
    monkeypatch.setattr("getpass.getpass", lambda prompt="": next(answers))
    assert cli("add", "alice", "--file", f, "--allow", "admin:*", "--replace") == 0
    assert UsersFile.load(users_file).authenticate("alice", "typed")


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["add", "alice", "--allow", "admin:*", "--password-env", "NEW_PW"], "already exists"),
        (["add", "bob", "--allow", "pub:x", "--password-env", "NEW_PW"], "unknown action"),
        (["add", "bob", "--allow", "publish:a b", "--password-env", "NEW_PW"], "pattern"),
        (["add", "b b", "--allow", "publish:x", "--password-env", "NEW_PW"], "bad user name"),
        (["add", "bob", "--allow", "publish:x", "--password-env", "UNSET_PW"], "UNSET_PW"),
        (["add", "bob", "--allow", "publish:x"], "the passwords differ"),
        (["remove", "carol"], "no such user"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(
    users_file: Path, monkeypatch, capsys, argv: list[str], reason: str
) -> None:
    assert (
        cli(
            "add",
            "alice",
            "--file",
            str(users_file),
            "--allow",
            "admin:*",
            "--password-env",
            "NEW_PW",
        )
        == 0
    )
    before = users_file.read_bytes()
    monkeypatch.delenv("UNSET_PW", raising=False)
    answers = iter(["one", "two"])
    monkeypatch.setattr("getpass.getpass", lambda prompt="": next(answers))
    capsys.readouterr()
    assert cli(*argv, "--file", str(users_file)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and reason in err and err.count("\n") == 1, err
    assert users_file.read_bytes() == before


def test_cli_corrupt_or_missing_file_exits_2(tmp_path: Path, capsys) -> None:
    bad = write(tmp_path, "users: [")
    assert cli("list", "--file", str(bad)) == 2
    assert cli("remove", "x", "--file", str(tmp_path / "missing.yaml")) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: {bad}: not valid YAML") and "cannot read" in err[1]


@pytest.mark.parametrize(
    "argv",
    [
        ["add", "a", "--file", "f", "--allow", "admin:*", "--password", "s3cret"],
        [
            "add",
            "a",
            "--file",
            "f",
            "--allow",
            "admin:*",
            "--password-env",
            "V",
            "--password-file",
            "p",
        ],
        ["add", "a", "--file", "f"],
    ],
)
def test_cli_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli(*argv)
    assert info.value.code == 2


@pytest.mark.parametrize(
    ("publisher_id", "owned"),
    [
        ("bob", True),
        ("bob-1", True),
        ("bob.orders", True),
        ("bobby", False),
        ("alice-bob", False),
        ("bob_1", False),
        ("BOB", False),
    ],
)
def test_a_user_owns_its_name_as_a_publisher_id_and_what_extends_it(
    publisher_id: str, owned: bool
) -> None:
    assert owns_publisher_id("bob", publisher_id) is owned


@pytest.mark.parametrize(
    ("publisher_id", "owner"),
    [("bob-1", "bob"), ("bob-x", "bob-x"), ("bob-x.1", "bob-x"), ("bob-xy", "bob"), ("b", None)],
)
def test_a_publisher_id_is_the_user_s_with_the_longest_name_it_extends(
    publisher_id: str, owner: str | None
) -> None:
    names = ["alice", "bob", "bob-x"]
    assert publisher_id_owner(publisher_id, names) == owner
    for name in names:
        assert owns_publisher_id(name, publisher_id, names) is (name == owner)
