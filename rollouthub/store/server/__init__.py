"""The store server: ``LightningStoreServer`` and the ASGI app it serves with uvicorn.

* :mod:`.store_server` -- ``LightningStoreServer`` (delegation to the wrapped store, lifecycle, pickling);
* :mod:`.app` -- the app: the route declarations on Starlette's router, behind the middleware;
* :mod:`.routing` -- the route declaration (:class:`~.routing.Route`) and its mounting on Starlette's routes;
* :mod:`.endpoint` -- a declared route's endpoint: parse the body and query, call the handler, answer;
* :mod:`.middleware` -- metrics, error mapping, bearer auth, body limit (one job each);
* :mod:`.routes` -- the REST API; :mod:`.export` -- export and conversation routes;
  :mod:`.otlp` -- OTLP/HTTP ingestion (:mod:`.otlp_decode`: payload to store spans); :mod:`.dashboard` -- the dashboard bundle; :mod:`.openapi` -- the OpenAPI
  document generated from the declarations, ``/openapi.json`` and ``/docs``;
* :mod:`.errors` -- the exception → status table, 422 bodies, metric path labels.
"""

from .store_server import LightningStoreServer

__all__ = ["LightningStoreServer"]
