"""Wording shared by messages and reports."""


def counted(n: int, word: str) -> str:
    """'1 configuration', '3 configurations': a count with its noun (plural by a trailing s)."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def config_text(config) -> str:
    """A configuration as `name=value` pairs ("" for none)."""
    return " ".join(f"{k}={v}" for k, v in config.items()) if config else ""
