"""The raw Pyro5 ceiling's server: a trivial daemon with ``receive(batch) -> [ids]``.

No broker code at all: the same Pyro5 thread server and msgpack serializer the service
uses (and TLS when ``$PUBSUB_TLS_*`` say so), to show what one process pair can do on this
machine. Prints ``raw-server ready <URI>`` and serves until SIGTERM / SIGINT.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import Pyro5.api
import Pyro5.server

from channel_server import tls

Pyro5.config.SERIALIZER = "msgpack"


@Pyro5.api.expose
class Sink:
    def receive(self, batch: list[dict[str, Any]]) -> list[str]:
        return [event["id"] for event in batch]


def main() -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    tls.from_environment(serving=True)
    daemon = Pyro5.server.Daemon(host="127.0.0.1", port=0)
    uri = daemon.register(Sink(), "bench.sink")
    loop = threading.Thread(target=daemon.requestLoop, name="raw-server", daemon=True)
    loop.start()
    print(f"raw-server ready {uri}", flush=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        daemon.shutdown()
        loop.join(5.0)
        daemon.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
