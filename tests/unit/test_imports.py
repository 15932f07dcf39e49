"""Imports point down: the pure core loads no Pyro5, socket or store; a client no broker.

Each check imports in a fresh interpreter (``sys.executable``), since this test process has
long since imported everything, and reads ``sys.modules`` afterwards, so what a module pulls
in transitively counts, not only what it names.

What the core may load besides itself: ``channel_server.errors``, ``channel_server.events``
(with ``channel_server.payloads``) and ``channel_server.names``, and the third-party
``msgpack`` (payload sizes), ``msgspec`` (events are its structs) and ``sortedcontainers``
(the partition queues). Neither is Pyro5, a thread,
a socket or a store. The stdlib's ``threading`` is not asserted on, since stdlib modules
may load it on their own; instead no core module may import a thread, socket or database
module itself (read from its source).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

import channel_server

PACKAGE_ROOT = Path(channel_server.__file__).resolve().parents[1]
CORE_DIR = PACKAGE_ROOT / "channel_server" / "core"

CORE_MAY_LOAD = (
    "channel_server.core",
    "channel_server.errors",
    "channel_server.events",
    "channel_server.payloads",
    "channel_server.unpacking",
)
"""Our modules the core may load (besides the ``channel_server`` package and ``names``)."""
NEVER_IN_CORE = ("Pyro5", "socket", "ssl", "select", "selectors", "sqlite3")
BROKER_CODE = (
    "channel_server.broker",
    "channel_server.channel",
    "channel_server.channel_stats",
    "channel_server.core",
    "channel_server.dispatch",
    "channel_server.nameservice",
    "channel_server.pull",
    "channel_server.push",
    "channel_server.store",
)
THREADS_IO_AND_RPC = {"threading", "_thread", "concurrent", "asyncio", "multiprocessing"}
THREADS_IO_AND_RPC |= {"socket", "ssl", "select", "selectors", "sqlite3", "Pyro5"}


def modules_loaded_by(statement: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``statement`` (this
    checkout's packages first on the path, as in this process)."""
    report = "import sys; print('\\n'.join(sorted(sys.modules)))"
    path = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")) if p)
    result = subprocess.run(
        [sys.executable, "-c", f"{statement}\n{report}"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        check=True,
        timeout=60,
    )
    return set(result.stdout.split())


def within(modules: Iterable[str], packages: Iterable[str]) -> list[str]:
    """The modules that are one of ``packages`` or inside one."""
    packages = tuple(packages)
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


IMPORT_ALL_OF_CORE = """
import importlib, pkgutil
import channel_server.core as core
for info in pkgutil.walk_packages(core.__path__, core.__name__ + "."):
    importlib.import_module(info.name)
"""


def test_the_core_loads_no_pyro5_socket_store_or_broker_module() -> None:
    loaded = modules_loaded_by(IMPORT_ALL_OF_CORE)

    assert "channel_server.core.channel_core" in loaded  # the walk did import the core
    ours = within(loaded, ["channel_server"])
    allowed = {"channel_server", "channel_server.names", *within(ours, CORE_MAY_LOAD)}
    assert sorted(set(ours) - allowed) == []
    assert within(loaded, NEVER_IN_CORE) == []


def core_sources() -> list[Path]:
    return sorted(CORE_DIR.glob("*.py"))


@pytest.mark.parametrize("source", core_sources(), ids=lambda p: p.name)
def test_no_core_module_imports_threads_sockets_or_a_database(source: Path) -> None:
    tree = ast.parse(source.read_text(), str(source))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imported.add(node.module.split(".")[0])

    assert sorted(imported & THREADS_IO_AND_RPC) == []


IMPORT_ALL_OF = """
import importlib, pkgutil
package = importlib.import_module({name!r})
for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    if not info.name.endswith(".__main__"):  # __main__ runs the command line
        importlib.import_module(info.name)
"""


@pytest.mark.parametrize(
    ("client", "also_never"),
    [
        ("publisher", ["sqlite3"]),
        # A subscriber serves pushes (its callback daemon uses the transport and
        # Pyro5.api, which loads sqlite3 for Pyro5's name server), but no broker code.
        ("subscriber", []),
        # The helpers both clients share (lookup, remote calls, state files, CLI runner).
        ("channel_client", []),
    ],
)
def test_a_client_package_loads_no_broker_code(client: str, also_never: list[str]) -> None:
    loaded = modules_loaded_by(f"import {client}")

    assert client in loaded
    assert within(loaded, [*BROKER_CODE, *also_never]) == []


@pytest.mark.parametrize("client", ["publisher", "subscriber", "channel_client"])
def test_every_module_of_a_client_package_loads_no_broker_code(client: str) -> None:
    loaded = modules_loaded_by(IMPORT_ALL_OF.format(name=client))

    assert f"{client}.cli" in loaded or f"{client}.remote" in loaded  # the walk did import
    assert within(loaded, BROKER_CODE) == []


@pytest.mark.parametrize(
    "module",
    ["channel_server.store.sqlite", "channel_server.credentials", "channel_server.users"],
)
def test_the_brokers_files_need_no_client_package(module: str) -> None:
    """Private files (store, token, users) come from ``channel_server.private_files``,
    which both sides share, not from the clients' package."""
    loaded = modules_loaded_by(f"import {module}")

    assert module in loaded and "channel_server.private_files" in loaded
    assert within(loaded, ["channel_client", "publisher", "subscriber"]) == []
