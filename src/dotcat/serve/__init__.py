"""Serving: the search pipeline over HTTP (:mod:`dotcat.serve.app`), its micro-batcher, a
light client (:mod:`dotcat.serve.client`) and the web page (``static/``)."""
