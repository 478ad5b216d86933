"""Terminal output shared by every command: rich on stderr, plain when piped."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from rich.console import Console

# Progress and diagnostics go to stderr so stdout stays machine-readable.
err = Console(stderr=True, highlight=False)
out = Console(highlight=False)


@contextlib.contextmanager
def phase(title: str) -> Iterator[None]:
    """Show a long phase of a command as a spinner, then its duration."""
    start = time.perf_counter()
    if err.is_terminal:
        with err.status(f"{title}..."):
            yield
    else:
        err.print(f"{title}...")
        yield
    err.print(f"[green]✓[/] {title} [dim]({time.perf_counter() - start:.1f}s)[/]")
