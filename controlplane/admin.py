"""Shared by the apps' admin pages: amounts shown as people read them ("232 GiB", "12.5 cores"),
not as the integers they are stored as (249108103168 bytes, 12500 millicores)."""

from __future__ import annotations

_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def _number(value: float) -> str:
    # One decimal at most, and none when it is zero: "232", "1.5".
    return f"{value:.1f}".removesuffix(".0")


def readable_bytes(size: int | None) -> str:
    """Bytes in the largest binary unit that keeps at least 1: "232 GiB", "1.5 TiB", "512 B"."""
    if size is None:
        return "-"
    if abs(size) < 1024:
        return f"{size} B"
    value = float(size)
    for unit in _BINARY_UNITS[1:-1]:
        value /= 1024
        if abs(value) < 1024:
            return f"{_number(value)} {unit}"
    return f"{_number(value / 1024)} {_BINARY_UNITS[-1]}"


def readable_cpu(millicores: int | None) -> str:
    """Millicores as cores: "96 cores", "1 core", "0.25 cores" (to the millicore below one)."""
    if millicores is None:
        return "-"
    cores = millicores / 1000
    text = f"{cores:g}" if abs(cores) < 1 else _number(cores)
    return f"{text} core" if text == "1" else f"{text} cores"
