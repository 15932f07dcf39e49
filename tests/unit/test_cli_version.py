"""Every command says which version it is: an upgrade starts by asking (session 33's
operator probe found no way to tell, in the commands, the log or the metrics)."""

from __future__ import annotations

import pytest

from channel_server import cli as broker_cli
from channel_server.version import installed_version
from publisher import cli as publisher_cli
from spark_partitions import cli as spark_cli
from subscriber import cli as subscriber_cli


@pytest.mark.parametrize(
    "main", [broker_cli.main, publisher_cli.main, subscriber_cli.main, spark_cli.main]
)
def test_version_is_printed_and_exits_0(main, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip().endswith(f"(pubsub-channels {installed_version()})")
    assert installed_version().count(".") >= 2
