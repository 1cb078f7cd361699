"""Wording shared by messages and reports."""


def counted(n: int, word: str) -> str:
    """'1 configuration', '3 configurations': a count with its noun (plural by a trailing s)."""
    return f"{n} {word}" + ("" if n == 1 else "s")
