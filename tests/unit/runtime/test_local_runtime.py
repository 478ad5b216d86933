"""`deploy.py local`'s helpers without a server: free ports, and the server log lines an error shows.
"""

from __future__ import annotations

from tritonize.runtime import machine
from tritonize.runtime.machine import relevant_log_lines


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = machine.free_ports(3)
    assert len(set(ports)) == 3
    assert not any(machine.port_in_use("127.0.0.1", p) for p in ports)


def test_a_port_once_handed_out_is_never_handed_out_again() -> None:
    """Each call's ports are closed before they are used: the next call must not be offered them again."""
    seen: set[int] = set()
    for _ in range(200):
        ports = machine.free_ports(3)
        assert not seen & set(ports)
        seen.update(ports)


def test_relevant_log_lines_keep_failing_table_rows_only() -> None:
    log = "\n".join(
        [
            "W1122 02:16:07 1 cuda.cc:1] CUDA driver version is insufficient",
            "+-------+---------+--------+",
            "| Model | Version | Status |",
            "| good  | 1       | READY  |",
            "| bad   | 1       | UNAVAILABLE: Internal: ValueError: boom |",
            "|       |         | At: model.py(3) |",
            "| other | 1       | READY  |",
            'E1122 02:16:27 1 main.cc:1] "error: creating server: Internal - failed to load all models"',
        ]
    )
    lines = relevant_log_lines(log)
    assert lines[0].startswith("| bad") and "At: model.py(3)" in lines[1]
    assert not any("good" in line or "other" in line or "CUDA" in line for line in lines)
    assert "failed to load all models" in lines[-1]
