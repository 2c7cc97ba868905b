"""benchmarks/bench_reversible_decoder.py on the CPU: the depth sweep runs and its table says
what is flat (the saved bytes of the reversible mode do not grow with depth; stored's do)."""

from __future__ import annotations

import pytest

from benchmarks import bench_reversible_decoder as bench


def test_quick_depth_sweep_is_flat_only_for_reversible(capsys):
    rows = bench.main(["--quick", "--depths", "1,3", "--steps", "1", "--warmup", "0"])
    saved = {(r["mode"], r["layers"]): r["saved_mib"] for r in rows}
    assert saved[("reversible", 1)] == saved[("reversible", 3)]
    assert saved[("stored", 3)] > 2 * saved[("stored", 1)]
    out = capsys.readouterr().out
    assert "| reversible | 1: " in out and "| 1.000 |" in out


@pytest.mark.parametrize("depths", ["0", "a,b"])
def test_bad_depths_are_refused(depths, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--quick", "--depths", depths])
    assert "--depths" in capsys.readouterr().err
