"""``ojas_ref.tools.throughput``: the FLOP count of a step against torch's FlopCounterMode on a
real Hugging Face Llama on the CPU, the GEMM rate measurement, the time prediction, the
H200 records' achieved FLOP/s, and ``ojas plan --time``."""

from __future__ import annotations

import math
import time

import pytest
import torch
from torch.utils import flop_counter

from _plan_fixtures import RECORDS_PATHS  # tests/_plan_fixtures.py: bench_optimize_model's H200 records
from ojas_ref.recipe import MemoryRecipe, dtype_name
from ojas_ref.tools import plan as P
from ojas_ref.tools import throughput as T
from ojas_ref.tools.cli import main

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

aten = torch.ops.aten
#: the CPU's SDPA ops are not in FlopCounterMode's table: count them with torch's own
#: formulas for the CUDA flash kernels (full square: its "NB: We aren't accounting for causal")
CPU_SDPA = {
    aten._scaled_dot_product_flash_attention_for_cpu: flop_counter.sdpa_flop.__wrapped__,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: flop_counter.sdpa_backward_flop.__wrapped__,
}
ATTENTION_OPS = {str(op) for op in CPU_SDPA}


def _llama(checkpoint: bool, **overrides):
    config = transformers.LlamaConfig(
        **(
            dict(
                vocab_size=101,
                hidden_size=64,
                intermediate_size=176,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=4,
                max_position_embeddings=128,
                tie_word_embeddings=False,
                attention_dropout=0.0,
            )
            | overrides
        )
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).train()
    if checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, P.Model.from_config(config)


def _counted(model, ids) -> tuple[int, int]:
    """(attention FLOPs, other products' FLOPs) FlopCounterMode counts in one forward +
    backward; it finds no other FLOP-counted operator."""
    with flop_counter.FlopCounterMode(display=False, custom_mapping=CPU_SDPA) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    assert set(counts) <= ATTENTION_OPS | {"aten.mm", "aten.addmm"}, counts
    attention = sum(n for op, n in counts.items() if op in ATTENTION_OPS)
    return attention, sum(n for op, n in counts.items() if op not in ATTENTION_OPS)


@pytest.mark.parametrize("checkpoint", [False, True], ids=["plain", "ckpt"])
@pytest.mark.parametrize(
    "overrides",
    [{}, dict(num_key_value_heads=2, tie_word_embeddings=True), dict(head_dim=32)],
    ids=["mha", "gqa-tied", "head-dim"],
)
def test_step_flops_match_flop_counter(checkpoint, overrides):
    """The products agree exactly with what FlopCounterMode counts; attention agrees with its
    full-square count times CAUSAL_FRACTION. Nothing else is counted (norms, rotary, SiLU,
    the softmax of the loss: no FLOP-counted operator)."""
    batch, seq = 2, 32
    model, m = _llama(checkpoint, **overrides)
    s = P.Setting(MemoryRecipe.plain(checkpoint=checkpoint), dtype=torch.float32, batch=batch, seq=seq)
    ids = torch.randint(0, m.vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    attention, products = _counted(model, ids)
    terms = T.flop_terms(m, s)
    layers_forward = terms["layer products forward"]
    expected_products = layers_forward + terms["head forward"] + terms["products backward"]
    expected_attention = terms["attention forward"] + terms["attention backward"]
    if checkpoint:  # the layers' forward again but down_proj (early stop), attention included
        down_proj = 2 * s.tokens * m.layers * m.hidden * m.intermediate
        expected_products += layers_forward - down_proj
        expected_attention += terms["checkpoint recompute"] - (layers_forward - down_proj)
    assert products == expected_products
    assert attention * T.CAUSAL_FRACTION == expected_attention
    assert T.step_flops(m, s) == expected_products + expected_attention


def test_checkpointing_adds_one_forward_of_the_layers_but_down_proj():
    m = P.PRESETS["llama-1b"]
    plain, ckpt = (T.flop_terms(m, P.Setting(MemoryRecipe.plain(checkpoint=c))) for c in (False, True))
    down_proj = 2 * 2048 * m.layers * m.hidden * m.intermediate
    assert T.step_flops(m, P.Setting(MemoryRecipe.plain(checkpoint=True))) - T.step_flops(m, P.Setting()) == (
        plain["layer products forward"] - down_proj + plain["attention forward"]
    )
    assert {k: v for k, v in ckpt.items() if k != "checkpoint recompute"} == plain


def test_ojas_loss_products_over_the_kept_tokens():
    """The ojas loss drops each sequence's last position (its shifted label is ignored) before
    any product. On the CPU the reference runs the 4-product schedule (logits recomputed in
    the backward): one head forward more than the kernel's 3 products the plan counts."""
    from ojas_ref import optimize_model

    batch, seq = 2, 32
    model, m = _llama(False)
    optimize_model(model, attention=False, linear_cross_entropy=True, rms_norm=False, swiglu=False)
    ids = torch.randint(0, m.vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    _, products = _counted(model, ids)
    terms = T.flop_terms(
        m, P.Setting(MemoryRecipe.plain(linear_cross_entropy=True), dtype=torch.float32, batch=batch, seq=seq)
    )
    assert terms["head forward"] == 2 * (batch * seq - batch) * m.hidden * m.vocab
    assert products == 3 * (terms["layer products forward"] + terms["head forward"]) + terms["head forward"]


def test_gemm_rate_is_positive_and_quick():
    start = time.perf_counter()
    rate = T.measure_gemm_rate("cpu", torch.float32, seconds=0.05, size=128)
    assert math.isfinite(rate) and rate > 0
    assert time.perf_counter() - start < 5
    for kwargs in (dict(seconds=0), dict(seconds=float("nan")), dict(size=0), dict(size=2.5)):
        with pytest.raises(ValueError):
            T.measure_gemm_rate("cpu", torch.float32, **kwargs)


def test_predict_time_is_flops_over_rate():
    m, s = P.PRESETS["llama-1b"], P.Setting()
    tokens_per_s, seconds = T.predict_time(m, s, 1e15)
    assert tokens_per_s == pytest.approx(s.tokens * 1e15 / T.step_flops(m, s))
    assert set(seconds) == {20, 30}
    assert seconds[20] == pytest.approx(20 * m.params() / tokens_per_s)
    assert T.predict_time(m, s, 1e15, efficiency=0.5)[0] == pytest.approx(tokens_per_s / 2)
    for kwargs in (
        dict(rate=0),
        dict(rate=float("inf")),
        dict(rate=1e12, efficiency=1.5),
        dict(rate=1e12, tokens_per_param=()),
        dict(rate=1e12, tokens_per_param=(-1,)),
    ):
        with pytest.raises(ValueError):
            T.predict_time(m, s, **kwargs)


RECORDS = [(path.name, s, t) for path in RECORDS_PATHS for s, t in P.load_records(path, "tokens_per_s")]


@pytest.mark.parametrize(
    "name,setting,tokens_per_s",
    RECORDS,
    ids=[f"{n.removesuffix('.json')}-{dtype_name(s.dtype)}-{s.optimizer}-{s.mode}" for n, s, _ in RECORDS],
)
def test_h200_records_imply_plausible_flop_rates(name, setting, tokens_per_s):
    """The counted FLOPs at the measured tokens/s: fp32 38.9-42.8 TFLOP/s (torch's default IEEE
    float32 products; the H200's float32 peak is about 67), the same with and without
    checkpointing (its recompute counted right); bf16 13.7-35.2% of the 790 TFLOP/s the
    H200's bf16 product ran at (the host-bound bf16 step's host varied by 20% and more
    between calls; the third record's call ran on a faster one): the FLOP bound
    overestimates a bf16 step 3-7x."""
    achieved = T.step_flops(P.record_model(RECORDS_PATHS[-1]), setting) * tokens_per_s / setting.tokens
    low, high = (
        (38e12, 44e12)
        if setting.dtype == torch.float32
        else (0.13 * T.H200_BF16_GEMM_RATE, 0.40 * T.H200_BF16_GEMM_RATE)
    )
    assert low <= achieved <= high, f"{achieved / 1e12:.1f} TFLOP/s"


def test_recorded_throughput_only_for_recorded_settings():
    m = P.PRESETS["llama-1b"]
    measured, achieved = T.recorded_throughput(m, P.Setting())
    assert measured == dict(P.load_records(RECORDS_PATHS[-1], "tokens_per_s"))[P.Setting()]
    assert achieved == pytest.approx(T.step_flops(m, P.Setting()) * measured / 2048)
    assert T.recorded_throughput(m, P.Setting(seq=4096)) is None
    assert T.recorded_throughput(P.PRESETS["llama-7b"], P.Setting()) is None


def test_duration():
    assert T.duration(90) == "1.5 minutes"
    assert T.duration(2 * 3600) == "2.0 hours"
    assert T.duration(375 * 86400) == "375.0 days"


def test_cli_time(capsys, monkeypatch):
    monkeypatch.setattr(T, "measure_gemm_rate", lambda device, dtype: 1e12)
    assert main(["plan", "--preset", "llama-1b", "--time", "--tokens-per-param", "20", "30"]) == 0
    out = capsys.readouterr().out
    m, s = P.PRESETS["llama-1b"], P.Setting()
    tokens_per_s, seconds = T.predict_time(m, s, 1e12)
    assert "GEMM rate measured on the CPU (bfloat16): 1.000 TFLOP/s" in out or "GEMM rate measured on NVIDIA" in out
    assert f"{tokens_per_s:,.0f} tokens/s" in out
    assert f"20 tokens per parameter ({20 * m.params() / 1e9:,.1f}B tokens): {T.duration(seconds[20])}" in out
    assert f"30 tokens per parameter ({30 * m.params() / 1e9:,.1f}B tokens): {T.duration(seconds[30])}" in out
    measured = dict(P.load_records(RECORDS_PATHS[-1], "tokens_per_s"))[P.Setting()]
    assert f"measured on an H200: {measured:,.0f} tokens/s" in out and "host-bound" in out
    assert main(["plan", "--preset", "llama-7b", "--time", "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert "(float32): 1.000 TFLOP/s" in out and "measured on an H200: " not in out.split("time to train")[1]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--time", "--fit", "24GiB"], "--time times one setting"),
        (["--time", "--tokens-per-param", "0"], "--tokens-per-param must be positive"),
        (["--time", "--tokens-per-param", "nan"], "--tokens-per-param must be positive"),
    ],
)
def test_cli_time_bad_arguments(capsys, argv, message):
    assert main(["plan", *argv]) == 2
    assert message in capsys.readouterr().err
