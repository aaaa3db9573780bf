"""The pages: server-rendered HTML (jinja2) over the same data as the API; static/app.js draws the charts (the
vendored uPlot), follows the live stream and sends the actions. Nothing is loaded from outside this server."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from trainctl.runs.progress import fmt_seconds, fmt_value
from trainctl.serve.security import COOKIE, cookie_value

TEMPLATES = Path(__file__).parent / "templates"
_ENV = {}


def env():
    if "env" not in _ENV:
        from jinja2 import Environment, FileSystemLoader, select_autoescape

        e = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]))
        e.filters["duration"] = _duration
        e.filters["value"] = _value
        _ENV["env"] = e
    return _ENV["env"]


def render(name: str, **context) -> str:
    return env().get_template(name).render(**context)


def _duration(seconds) -> str:
    return fmt_seconds(seconds) if isinstance(seconds, int | float) else "-"


def _value(v) -> str:
    return fmt_value(v) if isinstance(v, int | float) else "-"


def login_page(next_path: str = "/", failed: bool = False) -> str:
    return render("login.html", next=_local(next_path), failed=failed)


def _local(path: str) -> str:
    """A redirect target on this server only (no //evil.example, no scheme)."""
    return path if path.startswith("/") and not path.startswith("//") and "\\" not in path else "/"


def add_routes(app: FastAPI, store, secrets, config) -> None:
    from trainctl.serve.jobs import ActionError

    common = {"actions": config.allow_actions, "token": bool(config.token)}

    def page(name: str, title: str, **context) -> HTMLResponse:
        return HTMLResponse(render(name, title=title, **common, **context))

    def found(key: str):
        hit = store.find(key)
        if hit is None:
            return None
        return store.entry(*hit)

    def missing(key: str) -> HTMLResponse:
        body = render("missing.html", title="No such run", key=key, **common)
        return HTMLResponse(body, status_code=404)

    @app.get("/", include_in_schema=False)
    def runs_page() -> HTMLResponse:
        rows = [e.row() for e in store.entries()] + [_pending(j) for j in store.pending()]
        return page("runs.html", "Runs", rows=rows, roots=[str(r) for r in store.roots])

    @app.get("/runs/{key}", include_in_schema=False)
    def run_page(key: str) -> HTMLResponse:
        e = found(key)
        if e is None:
            return missing(key)
        from trainctl.runs.keys import key_metrics, key_patterns

        keys = [{"label": km.label, "names": list(km.names)} for km in key_metrics(e.info.family)] + key_patterns()
        return page("run.html", e.info.name, run=e.row(), keys=keys)

    @app.get("/runs/{key}/checkpoints", include_in_schema=False)
    def checkpoints_page(key: str) -> HTMLResponse:
        e = found(key)
        if e is None:
            return missing(key)
        from trainctl.serve.views import checkpoints

        return page("checkpoints.html", f"{e.info.name}: checkpoints", run=e.row(), checkpoints=checkpoints(e.path))

    @app.get("/runs/{key}/trajectories", include_in_schema=False)
    def trajectories_page(key: str) -> HTMLResponse:
        e = found(key)
        if e is None:
            return missing(key)
        from trainctl.serve.trajectories import step_summary

        return page("trajectories.html", f"{e.info.name}: trajectories", run=e.row(), steps=step_summary(e.path))

    @app.get("/compare", include_in_schema=False)
    def compare_page(runs: str = "") -> HTMLResponse:
        keys = [k for k in runs.split(",") if k]
        result, error = None, None
        if len(keys) >= 2:
            from trainctl.serve.views import comparison

            try:
                result = comparison(store, keys)
            except ActionError as e:
                error = e.message
        choices = [e.row() for e in store.entries(query_jobs=False)]
        return page("compare.html", "Compare", result=result, error=error, chosen=keys, choices=choices)

    @app.get("/gpus", include_in_schema=False)
    def gpus_page() -> HTMLResponse:
        from trainctl.serve.views import gpu_data

        return page("gpus.html", "GPUs", gpus=gpu_data(config.gpus))

    @app.get("/launch", include_in_schema=False)
    def launch_page(resume: str | None = None) -> HTMLResponse:
        from trainctl.config.search import GROUPS, SearchPath

        search = SearchPath.default()
        # a recipe first: it chooses the rest, which the other groups then change
        order = sorted(GROUPS, key=lambda g: g != "recipe")
        groups = {g: list(search.options(g)) for g in order}
        return page("launch.html", "Launch", groups=groups)

    @app.get("/login", include_in_schema=False)
    def login_get(next: str = "/") -> HTMLResponse:
        return HTMLResponse(login_page(next))

    @app.post("/login", include_in_schema=False)
    async def login_post(request: Request):
        import hmac

        form = parse_qs((await request.body()).decode("utf-8", errors="replace"))
        given = (form.get("token") or [""])[0]
        target = _local((form.get("next") or ["/"])[0])
        if not config.token:
            return RedirectResponse(target, status_code=303)
        if not hmac.compare_digest(given.encode(), config.token.encode()):
            return HTMLResponse(login_page(target, failed=True), status_code=401)
        response = RedirectResponse(target, status_code=303)
        secure = request.url.scheme == "https"
        response.set_cookie(
            COOKIE, cookie_value(config.token), httponly=True, samesite="strict", secure=secure, path="/"
        )
        return response


def _pending(job: dict) -> dict:
    from trainctl.serve.views import pending_row

    return pending_row(job)
