"""The API's routes, a router per resource; each route declares where it is declared what it answers (status codes,
bodies, content types), and /openapi.json is built from them.

    jobs          /api/jobs, /api/jobs/{uuid}: list, create (plan), one job, start, stop, resume, log, config
    metrics       /api/jobs/{uuid}/metrics, /api/jobs/{uuid}/events (the live stream), /metrics (Prometheus)
    checkpoints   /api/jobs/{uuid}/checkpoints (+ /merge, /eval, /prune), /api/jobs/{uuid}/actions, /api/actions/{id}
    trajectories  /api/jobs/{uuid}/rollouts, /api/jobs/{uuid}/rollouts/{step}, /api/jobs/{uuid}/prompts/{key}
    compare       /api/compare
    platform      /api/gpus, /api/groups
    files         /files/{uuid}/{path}
common holds what they share: the server's state, the error body, the answers every route may give.
The pages (HTML) are trainctl.serve.pages'.
"""

from __future__ import annotations

from trainctl.serve.routes import checkpoints, compare, files, jobs, metrics, platform, trajectories

ROUTERS = [r.router for r in (jobs, metrics, checkpoints, trajectories, compare, platform, files)]
