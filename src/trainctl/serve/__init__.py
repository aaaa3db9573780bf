"""`trainctl serve`: a local training platform over the run folders.

One process (FastAPI on uvicorn) reads the run folders: a REST API for jobs (create, start, stop, resume; metrics,
checkpoints, a live stream of Server-Sent Events), /metrics for Prometheus, and server-rendered pages with a vendored
chart library (static/vendor/uplot). Nothing leaves the machine and nothing in a run folder changes except through an
action (`--allow-actions`). Modules: app (the routes put together), routes (a router per resource: the API and its
/openapi.json), security (who may reach it, what leaves it), store (runs, created jobs and their uuids), reading
(metrics by offset, summaries), events (the stream), jobs, planner and background (what actions do), prom, pages,
trajectories, server (uvicorn).
"""
