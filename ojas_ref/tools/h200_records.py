"""The H200 measurements ``ojas plan`` prints beside its predictions (:func:`ojas_ref.tools.records.measured_peak`):
per model shape and setting, the peak of device memory (``torch.cuda.max_memory_allocated``,
bytes) and the tokens per second (from the median step time) of one training step.

Provenance: one NVIDIA H200, torch 2.11.0+cu130, transformers 5.17.0, triton 3.6.0, measured
2026-12-01 by benchmarks/bench_optimize_model.py (the 1.06B ``llama-1b`` shape, batch 1 x 2048
tokens: records committed in 343a89b, 5e67495 and fefa974) and benchmarks/bench_memory.py (its
techniques on ``llama-1b``, the presets from 0.5B to 70B, llama-70b's shape at 23 and 58 layers:
records committed in 24d1ecc, 232e768, 0c55719 and 9f59f4c). Where two records hold a setting
(the same tensors counted: the latest bench_optimize_model file ran the fused RoPE too, which changes
none) the later one is kept, bench_optimize_model's over bench_memory's. The record files are
tests/fixtures/plan/*.json; tests/tools/test_plan.py checks that this table is what they give.
"""

from __future__ import annotations

from ojas_ref.recipe import MemoryRecipe

__all__ = ["MODELS", "OJAS", "ROWS"]

#: model shapes by name: (hidden, layers, heads, kv_heads, intermediate, vocab, tied, head_dim)
MODELS = {
    "llama-1b": (2048, 18, 16, 16, 5632, 32000, False, 128),
    "llama-0.5b": (896, 24, 14, 2, 4864, 151936, True, 64),
    "llama-3b": (3072, 28, 24, 8, 8192, 128256, True, 128),
    "llama-7b": (4096, 32, 32, 32, 11008, 32000, False, 128),
    "llama-13b": (5120, 40, 40, 40, 13824, 32000, False, 128),
    "llama-70b@23": (8192, 23, 64, 8, 28672, 32000, False, 128),
    "llama-70b@58": (8192, 58, 64, 8, 28672, 32000, False, 128),
    "llama-70b": (8192, 80, 64, 8, 28672, 32000, False, 128),
}
#: the primitives of optimize_model that the planner counts (the recipe's fields)
OJAS = dict(attention=True, linear_cross_entropy=True, rms_norm=True, swiglu=True)
#: (model name, the :class:`~ojas_ref.memory.Setting`'s keywords other than its defaults, peak bytes,
#: tokens per second): each setting as its record file gives it (:func:`ojas_ref.tools.records.load_records`,
#: :func:`~ojas_ref.tools.records.memory_record_setting`)
ROWS = (
    (
        "llama-1b",
        dict(dtype="float32", optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint=True)),
        8558249984,
        5280.266333540036,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32",
            optimizer="sgd",
            recipe=MemoryRecipe.plain(rope=True, checkpoint=True, in_backward=True, **OJAS),
        ),
        5007493120,
        5404.47060658586,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32", optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint="offload", in_backward=True, **OJAS)
        ),
        4739057664,
        5352.791930804171,
    ),
    ("llama-1b", dict(dtype="float32", recipe=MemoryRecipe.plain(checkpoint=True)), 21188060672, 5023.346209999465),
    (
        "llama-1b",
        dict(dtype="float32", recipe=MemoryRecipe.plain(rope=True, checkpoint=True, in_backward=True, **OJAS)),
        13602080768,
        5109.547035574192,
    ),
    (
        "llama-1b",
        dict(dtype="float32", recipe=MemoryRecipe.plain(checkpoint="offload", in_backward=True, **OJAS)),
        13300090880,
        5076.735287676258,
    ),
    (
        "llama-1b",
        dict(dtype="float32", recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, state_device="cpu", **OJAS)),
        5678434304,
        3640.772274143874,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32",
            recipe=MemoryRecipe.plain(checkpoint="offload", in_backward=True, state_device="cpu", **OJAS),
        ),
        5376444416,
        3149.3361471586304,
    ),
    ("llama-1b", dict(optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint=True)), 4340583424, 21743.482570262913),
    (
        "llama-1b",
        dict(optimizer="sgd", recipe=MemoryRecipe.plain(rope=True, checkpoint=True, in_backward=True, **OJAS)),
        2564159488,
        24920.559632050925,
    ),
    (
        "llama-1b",
        dict(optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint="offload", in_backward=True, **OJAS)),
        2438330368,
        15717.283158937484,
    ),
    ("llama-1b", dict(recipe=MemoryRecipe.plain(checkpoint=True)), 10636531200, 17240.558531801373),
    (
        "llama-1b",
        dict(recipe=MemoryRecipe.plain(rope=True, checkpoint=True, in_backward=True, **OJAS)),
        6842505216,
        20079.036893310447,
    ),
    (
        "llama-1b",
        dict(recipe=MemoryRecipe.plain(checkpoint="offload", in_backward=True, **OJAS)),
        6722074624,
        14349.89895337961,
    ),
    (
        "llama-1b",
        dict(recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, state_device="cpu", **OJAS)),
        2877536256,
        11936.514829903594,
    ),
    (
        "llama-1b",
        dict(recipe=MemoryRecipe.plain(checkpoint="offload", in_backward=True, state_device="cpu", **OJAS)),
        2742261760,
        11836.423539554618,
    ),
    ("llama-0.5b", dict(optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint=True)), 4904907264, 11436.231980906132),
    (
        "llama-0.5b",
        dict(optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS)),
        1903796224,
        11066.404535892229,
    ),
    ("llama-0.5b", dict(recipe=MemoryRecipe.plain(checkpoint=True)), 6885474304, 10244.230636758573),
    (
        "llama-0.5b",
        dict(recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS)),
        3900256256,
        10351.773114932897,
    ),
    ("llama-3b", dict(optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint=True)), 14496283136, 8378.702733556289),
    (
        "llama-3b",
        dict(optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS)),
        8910180352,
        10793.95295138387,
    ),
    ("llama-3b", dict(recipe=MemoryRecipe.plain(checkpoint=True)), 32197819904, 7312.852225487333),
    (
        "llama-3b",
        dict(recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS)),
        21762228224,
        9214.045951937107,
    ),
    ("llama-7b", dict(optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint=True)), 27038665216, 5782.208620372827),
    (
        "llama-7b",
        dict(optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS)),
        14489077760,
        8587.084744876753,
    ),
    ("llama-7b", dict(recipe=MemoryRecipe.plain(checkpoint=True)), 67452380672, 6014.257231391402),
    (
        "llama-7b",
        dict(recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS)),
        41594505216,
        6907.00731810929,
    ),
    ("llama-13b", dict(optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint=True)), 52400118272, 4481.923233877165),
    (
        "llama-13b",
        dict(optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS)),
        27601885184,
        5135.239432826846,
    ),
    ("llama-13b", dict(recipe=MemoryRecipe.plain(checkpoint=True)), 130851819008, 3442.8935988879216),
    (
        "llama-13b",
        dict(recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS)),
        80074989568,
        3811.8548622935136,
    ),
    (
        "llama-70b@23",
        dict(recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, state_device="cpu", **OJAS)),
        43691428352,
        898.4035817554002,
    ),
    (
        "llama-70b@58",
        dict(optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS)),
        103469746688,
        1470.3781348941486,
    ),
    (
        "llama-70b",
        dict(optimizer="sgd", recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS)),
        141856737792,
        1081.5260859048672,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32",
            recipe=MemoryRecipe.plain(
                checkpoint=True, in_backward=True, state_device="cpu", state_slice_mb=128.0, **OJAS
            ),
        ),
        5171095552,
        4770.7053533288745,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32",
            recipe=MemoryRecipe.plain(
                checkpoint="offload",
                checkpoint_split=True,
                in_backward=True,
                state_device="cpu",
                state_slice_mb=128.0,
                **OJAS,
            ),
        ),
        4818634752,
        4701.674527095052,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32",
            optimizer="sgd",
            recipe=MemoryRecipe.plain(checkpoint="offload", in_backward=True, bucket_cap_mb=32.0, **OJAS),
        ),
        4692920320,
        5369.2511415902445,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32",
            optimizer="sgd",
            recipe=MemoryRecipe.plain(
                checkpoint="offload",
                checkpoint_split=True,
                in_backward=True,
                bucket_cap_mb=32.0,
                head_update=True,
                **OJAS,
            ),
        ),
        4592117760,
        5365.467389997274,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32",
            recipe=MemoryRecipe.plain(checkpoint="offload", in_backward=True, bucket_cap_mb=32.0, **OJAS),
        ),
        13300090880,
        5038.234213547496,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32",
            recipe=MemoryRecipe.plain(
                checkpoint="offload",
                checkpoint_split=True,
                in_backward=True,
                bucket_cap_mb=32.0,
                state_device="cpu",
                state_slice_mb=128.0,
                **OJAS,
            ),
        ),
        4757784576,
        4857.971826863755,
    ),
    (
        "llama-1b",
        dict(
            optimizer="sgd",
            recipe=MemoryRecipe.plain(checkpoint="offload", in_backward=True, bucket_cap_mb=32.0, **OJAS),
        ),
        2404771840,
        18307.531714527297,
    ),
    (
        "llama-1b",
        dict(
            optimizer="sgd",
            recipe=MemoryRecipe.plain(
                checkpoint="offload",
                checkpoint_split=True,
                in_backward=True,
                bucket_cap_mb=32.0,
                head_update=True,
                **OJAS,
            ),
        ),
        2354300928,
        13508.297846266807,
    ),
    (
        "llama-1b",
        dict(recipe=MemoryRecipe.plain(checkpoint="offload", in_backward=True, bucket_cap_mb=32.0, **OJAS)),
        6690461696,
        11894.496581955733,
    ),
    (
        "llama-1b",
        dict(
            recipe=MemoryRecipe.plain(
                checkpoint="offload",
                checkpoint_split=True,
                in_backward=True,
                bucket_cap_mb=32.0,
                state_device="cpu",
                state_slice_mb=128.0,
                **OJAS,
            )
        ),
        2499000320,
        7555.839382430893,
    ),
    ("llama-1b", dict(dtype="float32", optimizer="sgd", recipe=MemoryRecipe.plain()), 11475503616, 6603.585805776533),
    (
        "llama-1b",
        dict(
            dtype="float32",
            optimizer="sgd",
            ojas_attention_copy=True,
            recipe=MemoryRecipe.plain(attention=True, linear_cross_entropy=True, in_backward=True),
        ),
        11306750976,
        6420.856134603044,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32",
            optimizer="sgd",
            ojas_attention_copy=True,
            recipe=MemoryRecipe.plain(attention=True, linear_cross_entropy=True, checkpoint=True, in_backward=True),
        ),
        5102914048,
        5173.726158327464,
    ),
    ("llama-1b", dict(dtype="float32", recipe=MemoryRecipe.plain()), 21188060672, 6213.912487049125),
    (
        "llama-1b",
        dict(
            dtype="float32",
            ojas_attention_copy=True,
            recipe=MemoryRecipe.plain(attention=True, linear_cross_entropy=True, in_backward=True),
        ),
        19962235392,
        6015.327503866976,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32",
            ojas_attention_copy=True,
            recipe=MemoryRecipe.plain(attention=True, linear_cross_entropy=True, checkpoint=True, in_backward=True),
        ),
        13617809920,
        4904.538997695255,
    ),
    ("llama-1b", dict(optimizer="sgd", recipe=MemoryRecipe.plain()), 6477856768, 38333.55250029622),
    (
        "llama-1b",
        dict(
            optimizer="sgd",
            ojas_attention_copy=True,
            recipe=MemoryRecipe.plain(attention=True, linear_cross_entropy=True, in_backward=True),
        ),
        5999756288,
        31112.75536757129,
    ),
    (
        "llama-1b",
        dict(
            optimizer="sgd",
            ojas_attention_copy=True,
            recipe=MemoryRecipe.plain(attention=True, linear_cross_entropy=True, checkpoint=True, in_backward=True),
        ),
        2636511744,
        14821.722773346959,
    ),
    ("llama-1b", dict(recipe=MemoryRecipe.plain()), 10703921152, 31125.796029316814),
    (
        "llama-1b",
        dict(
            ojas_attention_copy=True,
            recipe=MemoryRecipe.plain(attention=True, linear_cross_entropy=True, in_backward=True),
        ),
        10334804480,
        22100.055031617903,
    ),
    (
        "llama-1b",
        dict(
            ojas_attention_copy=True,
            recipe=MemoryRecipe.plain(attention=True, linear_cross_entropy=True, checkpoint=True, in_backward=True),
        ),
        6911867392,
        13802.364874148345,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32",
            optimizer="sgd",
            ojas_attention_copy=True,
            recipe=MemoryRecipe.plain(in_backward=True, **OJAS),
        ),
        9787625984,
        6590.032175719368,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32",
            optimizer="sgd",
            ojas_attention_copy=True,
            recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS),
        ),
        4956112896,
        5288.122994015398,
    ),
    (
        "llama-1b",
        dict(dtype="float32", ojas_attention_copy=True, recipe=MemoryRecipe.plain(in_backward=True, **OJAS)),
        18443896832,
        6145.568112377951,
    ),
    (
        "llama-1b",
        dict(
            dtype="float32",
            ojas_attention_copy=True,
            recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS),
        ),
        13533923328,
        5014.652708702381,
    ),
    (
        "llama-1b",
        dict(optimizer="sgd", ojas_attention_copy=True, recipe=MemoryRecipe.plain(in_backward=True, **OJAS)),
        4896260608,
        22567.44511826616,
    ),
    (
        "llama-1b",
        dict(
            optimizer="sgd",
            ojas_attention_copy=True,
            recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS),
        ),
        2504390656,
        13411.477015525268,
    ),
    (
        "llama-1b",
        dict(ojas_attention_copy=True, recipe=MemoryRecipe.plain(in_backward=True, **OJAS)),
        9231702016,
        21207.020124246854,
    ),
    (
        "llama-1b",
        dict(ojas_attention_copy=True, recipe=MemoryRecipe.plain(checkpoint=True, in_backward=True, **OJAS)),
        6781843456,
        14439.094055848493,
    ),
    (
        "llama-1b",
        dict(dtype="float32", optimizer="sgd", recipe=MemoryRecipe.plain(rope=True, in_backward=True, **OJAS)),
        9554579968,
        6696.28367323941,
    ),
    (
        "llama-1b",
        dict(dtype="float32", recipe=MemoryRecipe.plain(rope=True, in_backward=True, **OJAS)),
        18210064384,
        6238.443572662492,
    ),
    (
        "llama-1b",
        dict(optimizer="sgd", recipe=MemoryRecipe.plain(rope=True, in_backward=True, **OJAS)),
        4813423104,
        42921.196515538955,
    ),
    ("llama-1b", dict(recipe=MemoryRecipe.plain(rope=True, in_backward=True, **OJAS)), 9147815936, 32357.337242673526),
)
