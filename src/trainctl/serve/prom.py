"""`/metrics`: the Prometheus exposition of the runs, read from their folders at scrape time (a custom collector:
nothing is kept between scrapes), so that the Prometheus that scrapes Ray and vLLM scrapes trainctl too.

Label cardinality is bounded: a run's metrics are its family's key metrics only (at most six per run, from
trainctl.runs.keys), and only while it runs; every run has one status series.
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from trainctl.serve.reading import key_values
from trainctl.serve.store import RunStore

STATUSES = ("running", "queued", "done", "failed", "interrupted", "killed", "created", "stopped", "lost", "unknown")


class RunsCollector(Collector):
    def __init__(self, store: RunStore, gpus=None):
        self.store = store
        self.gpus = gpus  # a callable returning runs.gpus.GpuStat items (tests give their own)

    def collect(self):
        entries = self.store.entries(query_jobs=True)
        status = GaugeMetricFamily(
            "trainctl_run_status", "1 for the run's status (the liveness rules of `runs ls`)", labels=["run", "status"]
        )
        runs = GaugeMetricFamily("trainctl_runs", "runs by status", labels=["status"])
        metric = GaugeMetricFamily(
            "trainctl_run_metric", "a running run's latest value of a key metric", labels=["run", "metric"]
        )
        step = GaugeMetricFamily("trainctl_run_step", "a running run's last logged step", labels=["run"])
        total = GaugeMetricFamily("trainctl_run_steps_planned", "a running run's step count", labels=["run"])
        speed = GaugeMetricFamily("trainctl_run_steps_per_second", "a running run's training speed", labels=["run"])
        counts = dict.fromkeys(STATUSES, 0)
        for e in entries:
            info, summ = e.info, e.summary
            counts[info.status] = counts.get(info.status, 0) + 1
            status.add_metric([info.name, info.status], 1)
            if not info.alive:
                continue
            for name, value in key_values(info.family, summ.last or {}).items():
                if value is not None:
                    metric.add_metric([info.name, name], float(value))
            step.add_metric([info.name], summ.steps_done)
            if info.steps_total:
                total.add_metric([info.name], info.steps_total)
            per = summ.per_step or _average(e)
            if per:
                speed.add_metric([info.name], 1.0 / per)
        for s, n in counts.items():
            runs.add_metric([s], n)
        yield from (status, runs, metric, step, total, speed)
        yield from self._gpus()

    def _gpus(self):
        from trainctl.runs.gpus import gpu_stats

        stats = (self.gpus or gpu_stats)()
        util = GaugeMetricFamily(
            "trainctl_gpu_utilization_ratio", "GPU utilisation (NVML), 0-1", labels=["gpu", "name"]
        )
        used = GaugeMetricFamily("trainctl_gpu_memory_used_bytes", "GPU memory in use", labels=["gpu", "name"])
        cap = GaugeMetricFamily("trainctl_gpu_memory_total_bytes", "GPU memory", labels=["gpu", "name"])
        temp = GaugeMetricFamily("trainctl_gpu_temperature_celsius", "GPU temperature", labels=["gpu", "name"])
        power = GaugeMetricFamily("trainctl_gpu_power_watts", "GPU power draw", labels=["gpu", "name"])
        for g in stats:
            labels = [str(g.index), g.name]
            util.add_metric(labels, g.utilization / 100.0)
            used.add_metric(labels, g.used)
            cap.add_metric(labels, g.total)
            if g.temperature is not None:
                temp.add_metric(labels, g.temperature)
            if g.power is not None:
                power.add_metric(labels, g.power)
        yield from (util, used, cap, temp, power)


def _average(e) -> float | None:
    """Seconds per step over the current attempt (start-up included) where the trainer logs no step time."""
    attempt = e.info.attempts[-1] if e.info.attempts else {}
    from trainctl.runs.status import parse_time

    started = parse_time(attempt.get("started"))
    done = e.summary.steps_done
    if not started or not done:
        return None
    import time

    return max(1e-9, time.time() - started.timestamp()) / done


def registry(store: RunStore, gpus=None) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(RunsCollector(store, gpus))
    return reg
