"""``LightningStoreClient``: the store over HTTP (store.md 12).

* :mod:`.transport` -- sessions per event loop, the retry schedule with health probing, HTTP errors;
* :mod:`.api` -- the ``LightningStore`` methods, each one REST call of store.md 11.6.
"""

from .api import DEQUEUE_WAIT_SLICE_SECONDS, LightningStoreClient
from .transport import (
    API_TOKEN_ENV,
    LightningStoreAuthError,
    LightningStoreEvictedError,
    LightningStoreHTTPError,
    LightningStoreRemoteValueError,
)

__all__ = [
    "API_TOKEN_ENV",
    "DEQUEUE_WAIT_SLICE_SECONDS",
    "LightningStoreAuthError",
    "LightningStoreClient",
    "LightningStoreEvictedError",
    "LightningStoreHTTPError",
    "LightningStoreRemoteValueError",
]
