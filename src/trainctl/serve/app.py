"""The server: the REST API under /api (described by /openapi.json), the live stream, /metrics for Prometheus, the
pages and files. `build(config)` returns the ASGI app uvicorn serves, wrapped in the security layers
(trainctl.serve.security: Redact outside Guard outside the routes).

The API's routes live in trainctl.serve.routes, a router per resource, each route with the answers it documents;
here they are put together with what every route shares: the error body of 4xx answers, 401 where a token is
needed, and 405 with an Allow header for a method a path does not serve (the Guard asks `allowed_methods`).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from trainctl.errors import TrainctlError
from trainctl.serve import jobs
from trainctl.serve.routes import ROUTERS
from trainctl.serve.routes.common import MEANINGS, Fast, ServeConfig, Server, answers
from trainctl.serve.security import Guard, Redact, Secrets, allowed_hosts
from trainctl.serve.store import RunStore

__all__ = ["ServeConfig", "build", "create_app"]

STATIC = Path(__file__).parent / "static"


def create_app(config: ServeConfig) -> FastAPI:
    secrets = Secrets(token=config.token)
    store = RunStore(config.roots, on_secret_names=secrets.add_names)
    server = Server(config, store, secrets, jobs.Actions(store))
    app = FastAPI(
        title="trainctl serve",
        version="1",
        description="Runs, jobs, metrics and checkpoints of the run folders this server reads. Every 4xx answer "
        'is {"error", "hint", "details"}; a method a path does not serve is answered 405 with an Allow header.',
        docs_url=None,  # Swagger UI and ReDoc load from a CDN: off; /openapi.json stays
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
        # each operation's id is its function's name (the OpenAPI links between them name these)
        generate_unique_id_function=lambda route: route.name,
        # the Guard answers 401 before any route when the server has a token
        responses=answers(401) if config.token else None,
    )
    app.state.server = server
    # what the server's shutdown stops (trainctl.serve.server)
    app.state.actions = server.actions

    @app.exception_handler(TrainctlError)
    async def _trainctl_error(request: Request, e: TrainctlError):
        status = e.status if isinstance(e, jobs.ActionError) else 422
        return Fast({"error": e.message, "hint": e.hint, "details": e.details}, status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException):
        """Starlette's and FastAPI's own answers (a body that is not UTF-8: 400), in the API's error body."""
        return Fast({"error": str(e.detail), "hint": None, "details": None}, status_code=e.status_code,
                    headers=e.headers)  # fmt: skip

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError):
        """FastAPI's own 422 (a wrong type, a missing field, an unknown one), in the API's error body."""
        details = [f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg')}" for err in e.errors()]
        return Fast(
            {"error": "the request does not match the API.", "hint": "GET /openapi.json describes it",
             "details": details},
            status_code=422,
        )  # fmt: skip

    for router in ROUTERS:
        app.include_router(router)
    _document(app, bool(config.token))

    from trainctl.serve import pages

    pages.add_routes(app, store, secrets, config)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _document(app: FastAPI, token: bool) -> None:
    """/openapi.json as the server answers: every error is the API's JSON error body (FastAPI's own 422, documented
    for every route with a parameter, included: the handlers above), and with a token every operation needs it (the
    login page's cookie works too)."""
    make = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = make()
        components = schema.setdefault("components", {})
        error = {"$ref": "#/components/schemas/ApiError"}
        for ops in schema.get("paths", {}).values():
            for op in ops.values():
                for code, answer in op.get("responses", {}).items():
                    refs = [c.get("schema", {}).get("$ref", "") for c in answer.get("content", {}).values()]
                    if any(r.endswith(("/HTTPValidationError", "/ApiError")) for r in refs):
                        # an error is JSON, whatever the route's own answer is (/files' text, /metrics')
                        answer["content"] = {"application/json": {"schema": error}}
                        answer["description"] = MEANINGS.get(int(code), answer.get("description"))
        for name in ("HTTPValidationError", "ValidationError"):
            components.get("schemas", {}).pop(name, None)
        if token:
            schemes = components.setdefault("securitySchemes", {})
            schemes["token"] = {"type": "http", "scheme": "bearer", "description": "trainctl serve --token-env"}
            schema["security"] = [{"token": []}]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi


def allowed_methods(app: FastAPI):
    """(scope) -> the methods the path serves (every route whose path matches, whatever its method), or None when
    no route's path matches (a 404)."""
    from starlette.routing import Match

    def methods(scope) -> set[str] | None:
        found: set[str] | None = None
        for route in app.router.routes:
            match, _ = route.matches(scope)
            if match is Match.NONE:
                continue
            found = (found or set()) | set(getattr(route, "methods", None) or ("GET", "HEAD"))
        return found

    return methods


def build(config: ServeConfig):
    """The ASGI app: the routes behind the Guard (host, token, methods, POST rules), all behind the Redactor."""
    app = create_app(config)
    hosts = allowed_hosts(config.host, config.allow_hosts)
    from trainctl.serve.pages import login_page

    outer = Redact(Guard(app, config.token, hosts, login_page, allowed_methods(app)), app.state.server.secrets)
    outer.inner = app
    return outer
