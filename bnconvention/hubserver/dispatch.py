"""The dispatch from a request to its endpoint: authenticate, route, run, and turn every refusal into a JSON error.

The endpoint table is built here from the endpoint modules' ``ENDPOINTS`` (route endpoint name -> function), so
the modules the endpoints share (``handlers``, ``routes``) never import the endpoints back.
"""

from __future__ import annotations

from collections.abc import Callable

from bnconvention.hubserver import discussion_endpoints, lfs_endpoints, repo_endpoints, write_endpoints
from bnconvention.hubserver.errors import HubRequestError
from bnconvention.hubserver.handlers import HubContext, HubRequest, HubResponse, error_response, logger
from bnconvention.hubserver.routes import match_route

Endpoint = Callable[[HubContext, HubRequest], HubResponse]


ENDPOINTS: dict[str, Endpoint] = {**repo_endpoints.ENDPOINTS, **write_endpoints.ENDPOINTS,
                                  **discussion_endpoints.ENDPOINTS, **lfs_endpoints.ENDPOINTS}


def dispatch(context: HubContext, request: HubRequest) -> HubResponse:
    """Authenticate, route and run one request; every refusal becomes a JSON error response."""
    try:
        request.user = context.access.user_for(request.headers.get("Authorization"))
        request.route = match_route(request.method, request.raw_path)
        return ENDPOINTS[request.route.endpoint](context, request)
    except HubRequestError as exc:
        return error_response(exc)
    except Exception:  # noqa: BLE001 - a server bug must not kill the connection thread; it is logged
        logger.exception("hubserver: unhandled error on %s %s", request.method, request.raw_path)
        return error_response(HubRequestError(
            "Internal error in the local Hub server (see its log)", status=500, code="InternalError"))
