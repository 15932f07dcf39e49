"""Pure core: queues, assignment policy, health rules. No Pyro5, no threads, no files.

Below everything else: the core imports only itself, ``errors``, ``events`` and ``names``
(the channel's config and the store's snapshot live here for that reason), never the
wire, the transport or the store; tests/unit/test_imports.py holds it to that.
"""
