"""The one device option: `--device N`, `--device N,M` or `--device all` (N = CUDA ordinal as the process sees it)."""

from __future__ import annotations

from tracea_cli.errors import UsageError


def parse_devices(text: str | None, available: int) -> tuple[int, ...]:
    """Ordinals chosen by `text` among `available` devices; None means device 0 when there is one."""
    if text is None:
        return (0,) if available > 0 else ()
    if not text.strip():
        raise UsageError("--device was given an empty value.", "Give N, N,M or all, or leave --device out for device 0.")
    if text.strip().lower() == "all":
        if available == 0:
            raise UsageError("--device all was given, but no CUDA device is visible.", "Run `tracea doctor` to see why.")
        return tuple(range(available))
    chosen: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise UsageError(f"--device takes N, N,M or all; {text!r} is none of these.")
        idx = int(part)
        if idx >= available:
            seen = f"devices 0..{available - 1}" if available else "no CUDA device"
            raise UsageError(f"device {idx} does not exist: this process sees {seen}.", "Run `tracea doctor` to list them.")
        if idx not in chosen:
            chosen.append(idx)
    return tuple(chosen)
