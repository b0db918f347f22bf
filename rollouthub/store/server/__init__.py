"""The store server: ``LightningStoreServer`` and the ASGI app it serves with uvicorn.

* :mod:`.store_server` -- ``LightningStoreServer`` (delegation to the wrapped store, lifecycle, pickling);
* :mod:`.app` -- assembly of the app from the route declarations;
* :mod:`.routing` -- the route declaration (:class:`~.routing.Route`) and the matcher;
* :mod:`.pipeline` -- the one request pipeline (auth, limits, parsing, errors, metrics, CORS);
* :mod:`.routes` -- the REST API; :mod:`.export` -- export and conversation routes;
  :mod:`.otlp` -- OTLP/HTTP ingestion (:mod:`.otlp_decode`: payload to store spans); :mod:`.dashboard` -- the dashboard bundle; :mod:`.openapi` -- the OpenAPI
  document generated from the declarations, ``/openapi.json`` and ``/docs``;
* :mod:`.errors` -- the exception → status table, 422 bodies, metric path labels.
"""

from .store_server import LightningStoreServer

__all__ = ["LightningStoreServer"]
