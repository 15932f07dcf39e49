"""Issue 14: `serve --config FILE.toml`. The file's keys are serve's long flags, its values
are checked like the flags, flags on the command line override it, and anything else is
refused with one line naming the key (exit 2); the example file in docs/ is what the code
says."""

from __future__ import annotations

import argparse
import dataclasses
import tomllib
from pathlib import Path

import pytest

from channel_client import cli_common as cc
from channel_server import cli, config_file
from channel_server.config import BrokerConfig
from channel_server.core.config import ChannelConfig, setting
from channel_server.errors import InvalidArgument

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "broker.example.toml"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = cli.build_parser()
    args = parser.parse_args(argv)
    if args.config is not None:
        args = config_file.reparse(parser, argv, args, args.config)
    return args


def broker_config(tmp_path: Path, text: str, *flags: str) -> BrokerConfig:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return cli.config_from_args(parse(["serve", "--config", str(path), *flags]))


def refusal(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    """The one line `serve --config` prints for a bad file (after checking exit 2)."""
    path = tmp_path / "broker.toml"
    path.write_text(text)
    assert cli.main(["serve", "--config", str(path)]) == cc.EXIT_USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


FILE = """
broker-id = "b7"
capacity = 500
ack_timeout = 2.5          # either spelling of a flag
member-expiry = 0
max-queued-bytes = "64M"
payload-memory = 0
callback-hosts = "10.0.0.5,*"
channel = ["orders", "audit"]
memory = true
advertise = "::1"
"""


def test_a_file_sets_every_kind_of_value(tmp_path: Path) -> None:
    config = broker_config(tmp_path, FILE)
    assert (config.broker_id, config.channels, config.advertise) == (
        "b7",
        ("orders", "audit"),
        "[::1]",
    )
    channel = config.channel
    assert (channel.capacity, channel.ack_timeout_s, channel.member_expiry_s) == (500, 2.5, 0.0)
    assert (channel.max_queued_bytes, channel.payload_memory_bytes) == (64 << 20, 0)
    assert channel.callback_hosts == ("10.0.0.5", "*")
    assert parse(["serve", "--config", str(tmp_path / "broker.toml")]).memory is True


def test_flags_on_the_command_line_override_the_file(tmp_path: Path) -> None:
    config = broker_config(
        tmp_path, FILE, "--capacity", "7", "--broker-id", "b8", "--channel", "more"
    )
    assert (config.channel.capacity, config.broker_id) == (7, "b8")
    assert config.channel.ack_timeout_s == 2.5  # the file's, not the default
    assert config.channels == ("orders", "audit", "more")  # a repeatable flag adds


def test_one_of_two_exclusive_flags_on_the_command_line_replaces_the_other(
    tmp_path: Path,
) -> None:
    path = tmp_path / "broker.toml"
    path.write_text("memory = true\n")
    args = parse(["serve", "--config", str(path), "--data-dir", "elsewhere"])
    assert (args.memory, args.data_dir) == (False, Path("elsewhere"))
    path.write_text('data-dir = "there"\n')
    args = parse(["serve", "--config", str(path), "--memory"])
    assert (args.memory, args.data_dir) == (True, None)


@pytest.mark.parametrize(
    "text,line",
    [
        ("capacityy = 5\n", "capacityy: unknown key (the keys are the long flags of --help)"),
        ("capacity = 0\n", "capacity: must be at least 1, got '0'"),
        ("capacity = 1.5\n", "capacity: not an integer: '1.5'"),
        ("capacity = true\n", "capacity: must be a number or a string, not a boolean"),
        ("ack-timeout = [1]\n", "ack-timeout: must be a number or a string, not an array"),
        ('memory = "yes"\n', "memory: must be true or false, not a string"),
        ('channel = "orders"\n', "channel: must be an array of what --channel takes"),
        ('sync = "sometimes"\n', "sync: must be one of off, normal, full, not 'sometimes'"),
        ("[serve]\ncapacity = 5\n", "serve: unknown key"),
        ("capacity = 5\ncapacity_ = 6\n", "capacity_: unknown key"),
        (
            "max_members = 5\nmax-members = 6\n",
            "max-members: given twice (max_members and max-members)",
        ),
        ('memory = true\ndata-dir = "d"\n', "memory: data-dir and memory exclude each other"),
        ('advertise = "0.0.0.0"\n', "advertise: 0.0.0.0 is no address a client can connect to"),
        ("config = 'other.toml'\n", "config: unknown key"),
        ("capacity = \n", "not valid TOML"),
    ],
)
def test_a_bad_file_is_refused_in_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: str
) -> None:
    said = refusal(tmp_path, text, capsys)
    assert said.startswith(f"error: {tmp_path / 'broker.toml'}: "), said
    assert line in said, said


def test_a_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "--config", str(tmp_path / "nope.toml")]) == cc.EXIT_USAGE
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 'nope.toml'}: cannot read it: No such file or directory\n"
    )


def test_the_example_file_is_every_setting_with_its_default() -> None:
    assert EXAMPLE.read_text() == cli.serve_settings(None), (
        "docs/broker.example.toml is stale: write cli.serve_settings(None) to it"
    )
    serve = config_file.subcommand(cli.build_parser(), "serve")
    settable = {action.dest for action in config_file.settable(serve)}
    values = config_file.read(EXAMPLE, serve)
    commented = {"credentials", "tls_cert", "tls_key", "tls_ca", "advertise", "data_dir", "store"}
    no_default = {"users", "callback_hosts", "http", "max_connections_per_user"}
    assert set(values) == settable - commented - no_default
    assert values == {dest: serve.get_default(dest) for dest in values}
    assert "# member-expiry" not in EXAMPLE.read_text()  # set, with its comment above
    assert tomllib.loads(EXAMPLE.read_text())["member-expiry"] == 600.0


@pytest.mark.parametrize("store", [["--memory"], ["--data-dir", "d1"]], ids=["memory", "data-dir"])
def test_print_config_writes_a_file_that_reads_back_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], store: list[str]
) -> None:
    """With a data dir the file also says ``memory = false``, which read back as the flag
    given: "data-dir and memory exclude each other" (session 33's operator probe)."""
    argv = ["serve", *store, "--capacity", "9", "--channel", "a", "--callback-hosts", "h,*"]
    assert cli.main([*argv, "--print-config"]) == cc.EXIT_OK
    path = tmp_path / "printed.toml"
    path.write_text(capsys.readouterr().out)
    printed = parse(["serve", "--config", str(path)])
    assert cli.config_from_args(printed) == cli.config_from_args(parse(argv))
    assert (printed.memory, printed.data_dir) == (parse(argv).memory, parse(argv).data_dir)


def test_serve_flags_are_made_from_the_channel_settings() -> None:
    """Each ChannelConfig field marked as a setting is one serve flag with its default."""
    settings = [f for f in dataclasses.fields(ChannelConfig) if "flag" in f.metadata]
    assert len(settings) >= 19
    args = cli.build_parser().parse_args(["serve"])
    for f in settings:
        dest = f.metadata["flag"].lstrip("-").replace("-", "_")
        assert getattr(args, dest) == f.default, f.name
    with pytest.raises(ValueError, match="unknown flag kind"):
        setting(1, "--x", "any_int", "x")


def test_the_push_pool_size_is_a_flag_and_a_file_key(tmp_path: Path) -> None:
    assert cli.config_from_args(parse(["serve"])).push_threads == BrokerConfig().push_threads
    assert cli.config_from_args(parse(["serve", "--push-threads", "9"])).push_threads == 9
    assert broker_config(tmp_path, "push-threads = 2\n").push_threads == 2
    with pytest.raises(SystemExit):
        parse(["serve", "--push-threads", "0"])


def test_push_concurrency_is_a_flag_at_most_the_push_threads(tmp_path: Path) -> None:
    def concurrency(*argv: str) -> int:
        return cli.config_from_args(parse(["serve", *argv])).push_concurrency

    assert concurrency() == BrokerConfig().push_concurrency == 2
    assert concurrency("--push-concurrency", "3") == 3
    assert concurrency("--push-threads", "1") == 1  # the default follows the threads down
    assert broker_config(tmp_path, "push-concurrency = 4\n").push_concurrency == 4
    with pytest.raises(InvalidArgument, match="--push-threads"):
        concurrency("--push-threads", "4", "--push-concurrency", "5")
