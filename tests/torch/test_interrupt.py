"""Ctrl-C in every host wait, through torch on CPU tensors: a SIGINT raises
KeyboardInterrupt within 100 ms, while the peer the wait is for is alive and absent
(before, the rank stayed in the wait until its timeout, and torchrun needed SIGKILL)."""

from __future__ import annotations

import pytest

from harness import run_world


@pytest.mark.parametrize("wait", ["rendezvous", "barrier", "wait_signal", "all_to_all"])
def test_ctrl_c_ends_a_host_wait_within_100_ms(wait):
    env = {"SYMMWIN_TIMEOUT_MS": "20000"}
    results = run_world(
        2, "interrupt_scenarios.ctrl_c_in_a_host_wait", args={"wait": wait, "hold_s": 3}, env=env, timeout=60
    )
    r = results[0]
    assert r["raised"] == "KeyboardInterrupt", r
    assert r["after"] < 0.1, f"KeyboardInterrupt {r['after'] * 1000:.0f} ms after SIGINT in {wait}"
