"""``LightningStoreClient``: the store over HTTP.

* :mod:`.transport` -- sessions per event loop, the retry schedule with health probing, HTTP errors;
* :mod:`.api` -- the ``LightningStore`` methods, each one REST call of the server.
"""

from . import api
from .api import *  # noqa: F403 - the client and the names it works with (api.__all__)

__all__: list[str] = []
__all__ += api.__all__
