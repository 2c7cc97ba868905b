"""Writes ``triton36_reductions.json``: the reductions Triton 3.6 compiles for sm_90 (no GPU needed),
read from the PTX by the sm_90 tests' own helpers, for the CPU tests that pin the 3.6 order while
the tests run another Triton. Run with Triton 3.6 first on the path, e.g.
``PYTHONPATH=/tmp/t36:.:kernels python tests/verification/data/make_triton36_reductions.py``."""

import json
import pathlib
import re
import sys

import torch
import triton

from ojas_ref.verification import kernel_schedule as ks

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import test_kernel_schedule as forward  # noqa: E402
import test_kernel_schedule_backward as backward  # noqa: E402
import test_kernel_schedule_rowwise as rowwise  # noqa: E402


def main() -> None:
    if not triton.__version__.startswith("3.6."):
        raise SystemExit(f"needs Triton 3.6 first on the path, got {triton.__version__} ({triton.__file__})")
    out = {"triton": triton.__version__, "forward": {}, "bool_mask": {}, "rms_norm": {}, "delta": {}}
    for dtype, config, e, prec in forward.SM90_CASES:
        tree, offsets = forward._ptx_row_sum(forward._sm90_asm(dtype, config, e, prec)["ptx"])
        key = f"{dtype}-{config.block_m}x{config.block_n}-e{e}-{config.num_warps}warps"
        out["forward"][key] = {"tree": tree, "offsets": offsets}
    for key, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        asm = forward._sm90_launch_asm(forward.BOOL_MASK_CASE, dtype)
        tree, offsets = forward._ptx_row_sum(asm["ptx"])
        layouts = [line for line in asm["ttgir"].splitlines() if re.match(r"#\w+ = #ttg\.", line)]
        sums = [m.group(0) for m in ks._L_SUM.finditer(asm["ttgir"])]
        out["bool_mask"][key] = {"ttgir": "\n".join(layouts + sums), "tree": tree, "offsets": offsets}
    for direction, n, dtype, aligned in rowwise.RMS_SM90:
        asm = rowwise._rms_sm90(direction, n, dtype, aligned)
        sums, offsets = rowwise._ptx_in_thread_sums(asm["ptx"])
        layouts = [
            [axis, list(b.size), list(b.threads), list(b.warps)] for axis, b in rowwise.kr.reduce_layouts(asm["ttgir"])
        ]
        key = f"{direction}-{n}-{dtype}{'-aligned' * aligned}"
        out["rms_norm"][key] = {"layouts": layouts, "first_sum": sums[0] if sums else None, "offsets": offsets}
    for dtype in ("bf16", "fp32"):
        layout, tree, offsets = backward._aligned_delta(dtype)
        layout = [list(layout.size), list(layout.threads), list(layout.warps)]
        out["delta"][dtype] = {"layout": layout, "first_sum": tree, "offsets": offsets}
    (HERE / "triton36_reductions.json").write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
