"""The FastAPI application factory."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from hpcopt import __version__
from hpcopt.core.documents import clip
from hpcopt_server import errors as e
from hpcopt_server.api import analyses, notes, steering
from hpcopt_server.api.deps import Caller, etag_matches
from hpcopt_server.api.routes import router
from hpcopt_server.metrics import Metrics
from hpcopt_server.service import Service

STATUS: dict[type[e.ServiceError], int] = {
    e.NotFound: 404,
    e.InvalidArgument: 422,
    e.TooLarge: 413,
    e.FailedPrecondition: 409,
    e.Unauthenticated: 401,
    e.PermissionDenied: 403,
    e.QuotaExceeded: 429,
    e.Unavailable: 503,
}


def default_dashboard_dir() -> Path | None:
    """The dashboard's files, shipped inside the package (``dashboard/`` at the top of a
    checkout is a link to them)."""
    here = Path(__file__).resolve().parents[1] / "static"
    return here if (here / "index.html").is_file() else None


def create_app(
    service: Service, metrics: Metrics, dashboard_dir: Path | None = None, *, agent_server: str = ""
) -> FastAPI:
    """``agent_server``: the gRPC address agents should use (HOST:PORT), which the
    dashboard puts in the command it suggests for starting one."""
    app = FastAPI(
        title="hpcopt",
        version=__version__,
        description="Submit and watch hyper-parameter searches. Agents use the gRPC AgentService.",
    )
    app.state.service = service
    app.state.agent_server = agent_server

    @app.exception_handler(e.ServiceError)
    async def service_error(request: Request, exc: e.ServiceError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, e.Unauthenticated) else None
        if isinstance(exc, e.QuotaExceeded):
            headers = {"Retry-After": str(exc.retry_after)}
        elif isinstance(exc, e.Unavailable):
            headers = {"Retry-After": "5"}
        return JSONResponse(
            {"detail": exc.message, "errors": [{"field": f, "message": m} for f, m in exc.errors]},
            status_code=STATUS[type(exc)],
            headers=headers,
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {
                "field": clip(".".join(str(p) for p in err["loc"] if p not in ("query", "path", "body")), 200),
                "message": clip(err["msg"], 300),
            }
            for err in exc.errors()[:20]
        ]
        detail = "; ".join(f"{x['field']}: {x['message']}" for x in errors)
        return JSONResponse({"detail": f"invalid request: {detail}", "errors": errors}, status_code=422)

    @app.middleware("http")
    async def count_requests(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        t0 = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        metrics.http_requests.labels(request.method, path, str(response.status_code)).inc()
        response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - t0) * 1000:.1f}"
        return response

    @app.middleware("http")
    async def conditional_get(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        """Every GET under /api/v1 answers with an ETag (a hash of its body, unless the
        route set a cheaper one) and ``Cache-Control: no-cache``; a request whose
        ``If-None-Match`` names the current ETag gets an empty 304. The dashboard polls
        this way and redraws only what changed. Downloads (exports) are left alone."""
        response = await call_next(request)
        if (
            request.method != "GET"
            or response.status_code != 200
            or not request.url.path.startswith("/api/v1/")
            or "content-disposition" in response.headers
        ):
            return response
        etag = response.headers.get("etag")
        if etag is None:
            body = b"".join([chunk async for chunk in response.body_iterator])  # type: ignore[attr-defined]
            etag = f'"{hashlib.blake2b(body, digest_size=12).hexdigest()}"'
            response = Response(body, status_code=200, headers=dict(response.headers))
            response.headers["etag"] = etag
        response.headers["cache-control"] = "no-cache"
        if etag_matches(request.headers.get("if-none-match", ""), etag):
            return Response(status_code=304, headers={"etag": etag, "cache-control": "no-cache"})
        return response

    @app.get("/healthz", operation_id="healthz", tags=["system"])
    def healthz() -> dict[str, str]:
        return service.health()

    @app.get("/metrics", operation_id="metrics", tags=["system"], response_class=Response)
    async def prometheus(_: Caller) -> Response:
        body = await run_in_threadpool(generate_latest, metrics.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    app.include_router(router)
    app.include_router(notes.router)
    app.include_router(analyses.router)
    app.include_router(steering.router)
    dashboard = dashboard_dir or default_dashboard_dir()
    if dashboard is not None:
        app.mount("/", StaticFiles(directory=dashboard, html=True), name="dashboard")
    return app
