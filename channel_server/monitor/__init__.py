"""Watching a broker over HTTP: Prometheus metrics, a JSON API and a live page.

Off unless ``serve --http HOST:PORT``. The modules split one job each: ``settings`` (the
configuration, light: the broker's config imports it), ``views`` (the JSON shapes that
``list``/``status`` print too), ``metrics`` (a Prometheus collector reading ``stats()`` at
scrape time), ``http_auth`` (the broker's credentials over HTTP), ``server`` (the bounded
HTTP server the broker owns) and ``watch`` (``status --watch``). Nothing here is imported
by a client unless it uses it.
"""
