"""Serving: the search pipeline over HTTP (:mod:`dotcat.serve.app`), its micro-batcher, a
light client (:mod:`dotcat.serve.client`) and the web page (``static/``)."""

from dotcat.exports import lazy_exports

_EXPORTS = {
    "create_app": "dotcat.serve.app",
    "serve": "dotcat.serve.server",
    "ServeConfig": "dotcat.serve.config",
    "ServerClient": "dotcat.serve.client",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
