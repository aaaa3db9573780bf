"""GPU memory and utilisation through NVML (nvidia-ml-py), where there is an NVIDIA driver; nothing elsewhere."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class GpuStat:
    index: int
    name: str
    used: int  # bytes
    total: int
    utilization: int  # percent
    temperature: int | None = None  # degrees Celsius
    power: float | None = None  # watts


_STATE: dict = {}


def _nvml():
    """pynvml, initialised once; None without the package or a driver (CPU machines: the common case here)."""
    if "nvml" not in _STATE:
        _STATE["nvml"] = None
        try:
            import pynvml

            pynvml.nvmlInit()
            _STATE["nvml"] = pynvml
        except Exception:  # ImportError, NVMLError (no driver / library), OSError
            pass
    return _STATE["nvml"]


def _visible(count: int) -> list[int]:
    """The devices a local run sees: CUDA_VISIBLE_DEVICES when it lists indices, else all."""
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return list(range(count))
    try:
        return [i for i in (int(x) for x in spec.split(",") if x.strip()) if 0 <= i < count]
    except ValueError:  # GPU UUIDs: show them all
        return list(range(count))


def _thermals(nvml, handle) -> tuple[int | None, float | None]:
    """Temperature and power draw, where the device reports them (not every board does)."""
    try:
        temperature = int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
    except Exception:
        temperature = None
    try:
        power = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts
    except Exception:
        power = None
    return temperature, power


def driver_missing() -> str | None:
    """Why there are no GPU statistics here, in words (None where NVML answers)."""
    if _nvml() is not None:
        return None
    try:
        import pynvml  # noqa: F401
    except ImportError:
        return "nvidia-ml-py is not installed"
    return "no NVIDIA driver on this machine (NVML could not start)"


def gpu_stats() -> list[GpuStat]:
    nvml = _nvml()
    if nvml is None:
        return []
    out = []
    try:
        for i in _visible(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            name = nvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            out.append(GpuStat(i, name, int(memory.used), int(memory.total), int(rates.gpu), *_thermals(nvml, handle)))
    except Exception:  # a driver error mid-run: the view goes on without the GPU line
        return []
    return out
