"""Check, on this device, the premises the float theorems take about it, and keep the record.

The float theorems of rocq/ take the device's arithmetic as Section premises, which no proof
can discharge: the error of ``tl.exp2`` / ``tl.exp`` on x <= 0 (``ex_err``; the attention
kernels' exp2 and ``exp2(0) = 1``), of ``tl.log2`` / ``tl.log`` on a bounded range (``lg_err``
on :data:`LOG_DOMAIN`,
rocq/LinearCrossEntropy/Float/LseLossError.v, rocq/Attention/Float/SavedLseError.v), of the
softcap's ``tanh`` (``th_err``) and division (``dv_err``, rocq/LinearCrossEntropy/Float/SoftcapError.v),
the rounding of the float32 -> bfloat16 / float16 casts (the bf16 instances are round to
nearest even), the order of ``tl.sum`` in the rows kernel (``sum_ok ts Dt Bt``,
rocq/FloatModel/BlockedSum.v), the tensor cores' accumulation (rocq/FloatModel/TensorCoreSum.v:
block size k, alignment to F bits of the largest term or of the operands' exponents, output
rounding) and the 3xTF32 low part's reading
(rocq/FloatModel/Tf32Product.v). :func:`verify_device` checks each on this device:

* every float32 input of the premise's domain (:func:`float32_chunks` enumerates the bit
  patterns in chunks on the device; float64 reference, maximum error per chunk), or every
  ``step``-th pattern in the sampled ``quick`` mode (a smoke test, not a check);
* the casts over every finite float32 (bit for bit against round to nearest even and
  truncation; a bfloat16 input is a float32 input of the same value, so the float32 domains
  cover the bf16 paths);
* ``tl.sum``'s tree: ``linear_cross_entropy_error.tile_sum_identification`` (bit for bit);
* ``tl.dot``: bf16 operands and float32 "ieee" / "tf32" accumulation identified bit for bit
  among the models :class:`Accumulation` (:func:`identify_accumulation` on the test vectors of
  :func:`dot_test_vectors`, after Fasi, Higham, Mikaitis and Pranesh 2021: a large term and small
  ones at every position and exponent gap, both signs, plus random ones; the H100's models are in
  :class:`Accumulation`'s docstring); the TF32 reading of an
  unrounded float32 operand (:func:`tf32_readings` on every float32 in +-[1, 2)); "tf32x3"
  checked bit for bit against the split of Tf32Product.v with the identified parts, recording
  how the three TF32 dots are chained (:data:`TF32X3_SCHEDULES`, :func:`identify_tf32x3`; random
  vectors and :func:`tf32x3_probe_vectors`, which tell every two chainings apart).

The record (:func:`save_record`, :func:`load_record`) is JSON keyed by the GPU's name, the
driver, CUDA, torch and Triton versions, stored under ``$OJAS_DEVICE_CACHE`` or
``~/.cache/ojas/device/``; the GPU tests read it through :func:`checked_premises`, ``ojas audit``
through :func:`load_record` and :func:`failed`.
No theorem covers this module: it turns premises into recorded measurements.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
import math
import os
import struct
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

from ojas_ref.verification.bounds.common import _EXP2_ABS_ERROR

F64 = torch.float64
CACHE_ENV = "OJAS_DEVICE_CACHE"
#: The log premises' float32 domain: the theorems ask ``[1/(1+b), (1+b) n]`` for the row sum's
#: relative error ``b <= 1`` and ``n`` terms, inside [1/2, 2 n]: n up to 2^24.
LOG_DOMAIN = (0.5, 2.0**25)
#: Softcaps whose tanh and division premises are checked by default (the tests' caps).
SOFTCAPS = (5.0, 30.0)
_FLT_MAX = float(torch.finfo(torch.float32).max)
_TINY = _EXP2_ABS_ERROR  # 2^-126: the relative premises' absolute term (flush to zero included)


class PremisesNotChecked(RuntimeError):
    """No record for this device and these versions, or the record lacks a premise."""


class PremiseFailed(AssertionError):
    """The record says a premise does not hold on this device."""


# ---------------------------------------------------------------------------
# Enumerating float32 inputs
# ---------------------------------------------------------------------------


def _f32(x: float) -> float:
    """``x`` rounded to float32 (what a kernel's float32 scalar argument holds)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _bit_ranges(lo: float, hi: float) -> list[tuple[int, int, int]]:
    """(first, last, sign) of the magnitude bit patterns (inclusive) of the float32 in [lo, hi]
    (both signs of zero when 0 is inside)."""
    for name, v in (("lo", lo), ("hi", hi)):
        if math.isnan(v) or (math.isfinite(v) and _f32(v) != v):
            raise ValueError(f"{name} must be a float32 number, got {v!r}")
    if lo > hi:
        raise ValueError(f"lo must be <= hi, got [{lo}, {hi}]")
    ranges = []
    if lo < 0 or (lo == 0 and math.copysign(1.0, lo) < 0):
        ranges.append((_f32_bits(-hi) & 0x7FFFFFFF if hi < 0 else 0, _f32_bits(-lo) & 0x7FFFFFFF, 1))
    if hi >= 0:
        ranges.append((_f32_bits(max(lo, 0.0)) if lo > 0 else 0, _f32_bits(hi), 0))
    return ranges


def float32_count(lo: float, hi: float, step: int = 1) -> int:
    """How many inputs :func:`float32_chunks` yields for [lo, hi] at ``step``."""
    return sum(-(-(last + 1 - first) // step) for first, last, _ in _bit_ranges(lo, hi))


def float32_chunks(
    lo: float, hi: float, *, device: torch.device | str, step: int = 1, chunk: int = 1 << 24
) -> Iterator[torch.Tensor]:
    """Every float32 in [lo, hi] (every ``step``-th bit pattern when ``step > 1``), ``chunk`` at a
    time, as float32 tensors built on ``device`` from their bit patterns."""
    if step < 1 or chunk < 1:
        raise ValueError(f"step and chunk must be >= 1, got {step} and {chunk}")
    for first, last, sign in _bit_ranges(lo, hi):
        for start in range(first, last + 1, chunk * step):
            m = torch.arange(start, min(last + 1, start + chunk * step), step, dtype=torch.int64, device=device)
            bits = m + (sign << 31)
            yield torch.where(bits >= 1 << 31, bits - (1 << 32), bits).to(torch.int32).view(torch.float32)


# ---------------------------------------------------------------------------
# Accuracy premises of unary functions
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class UnaryPremise:
    """``|f(x) - ref(x)| <= assumed * |ref(x)| + 2^-126`` (``relative``: the premises' form, the
    absolute term ``_EXP2_ABS_ERROR`` of the bounds) or ``<= assumed`` (absolute) for every float32
    x in [lo, hi]."""

    name: str
    theorem: str
    lo: float
    hi: float
    relative: bool
    assumed: float

    @property
    def domain(self) -> str:
        return f"float32 in [{self.lo:g}, {self.hi:g}]"


def scan_unary(
    premise: UnaryPremise,
    fn: Callable[[torch.Tensor], torch.Tensor],
    ref: Callable[[torch.Tensor], torch.Tensor],
    *,
    device: torch.device | str,
    step: int = 1,
    chunk: int = 1 << 24,
) -> dict[str, Any]:
    """Run ``fn`` (float32 -> float32, the device's function) over the premise's domain against
    ``ref`` (float64): the inputs checked, ``measured`` and the input where it is reached, and
    whether the premise holds (``measured <= assumed``). Absolute premises: ``measured`` is the
    largest ``|fn(x) - ref(x)|``. Relative ones, stated as in Coq (``ex_err``, ``dv_err``:
    ``|fn(x) - ref(x)| <= ue |ref(x)| + 2^-126``): ``measured`` is the least ``ue`` that makes it
    hold on every input, ``max (err - 2^-126)^+ / |ref(x)|`` (infinite where ``ref(x) = 0`` and
    ``err > 2^-126``), and ``measured_below_normal`` the largest error where ``|ref(x)| < 2^-126``.
    A NaN where the reference is a number counts as an infinite error."""
    n, worst, worst_x, worst_abs, worst_abs_x = 0, 0.0, None, 0.0, None
    for x in float32_chunks(premise.lo, premise.hi, device=device, step=step, chunk=chunk):
        y, e = fn(x).to(F64), ref(x.to(F64))
        err = torch.where(y == e, 0.0, (y - e).abs())
        err = torch.where(torch.isnan(err) & ~torch.isnan(e), math.inf, err)
        if premise.relative:
            over = (err - _TINY).clamp_min(0.0)
            need = torch.where(over == 0, 0.0, over / e.abs())  # over / 0 = inf: the premise cannot hold
            below = torch.where(e.abs() >= _TINY, 0.0, err)
            j = int(below.argmax())
            if below[j].item() > worst_abs:
                worst_abs, worst_abs_x = below[j].item(), x[j].item()
        else:
            need = err
        i = int(need.argmax())
        if need[i].item() > worst:
            worst, worst_x = need[i].item(), x[i].item()
        n += x.numel()
    out: dict[str, Any] = dict(inputs=n, measured=worst, worst_input=worst_x, passed=bool(worst <= premise.assumed))
    if premise.relative:
        out.update(measured_below_normal=worst_abs, worst_input_below_normal=worst_abs_x)
    return out


# ---------------------------------------------------------------------------
# Casts
# ---------------------------------------------------------------------------

_INT = {torch.bfloat16: torch.int16, torch.float16: torch.int16}


def scan_cast(
    fn: Callable[[torch.Tensor], torch.Tensor],
    dtype: torch.dtype,
    *,
    device: torch.device | str,
    step: int = 1,
    chunk: int = 1 << 24,
) -> dict[str, Any]:
    """``fn`` (a float32 -> ``dtype`` cast) over every finite float32 and +-inf, bit for bit
    against round to nearest even (torch's cast) and truncation toward zero: the modes it
    matches on every input (``rounding``: the one, or "neither"); it passes when that is
    round to nearest even (the theorems' bf16 / fp16 instances)."""
    if dtype not in _INT:
        raise ValueError(f"dtype must be torch.bfloat16 or torch.float16, got {dtype}")
    modes, n = {"nearest", "truncate"}, 0
    for x in float32_chunks(-math.inf, math.inf, device=device, step=step, chunk=chunk):
        y = fn(x).view(_INT[dtype])
        rne = x.to(dtype)
        up = rne.to(F64).abs() > x.to(F64).abs()  # rounded away from zero: truncation is one below
        trunc = rne.view(_INT[dtype]) - up.to(_INT[dtype])
        if "nearest" in modes and not torch.equal(y, rne.view(_INT[dtype])):
            modes.discard("nearest")
        if "truncate" in modes and not torch.equal(y, trunc):
            modes.discard("truncate")
        n += x.numel()
    rounding = "nearest" if "nearest" in modes else ("truncate" if modes else "neither")
    return dict(inputs=n, measured=rounding, passed=rounding == "nearest")


# ---------------------------------------------------------------------------
# Tensor-core accumulation
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Accumulation:
    """How a dot ``c + sum_i a_i b_i`` accumulates (TensorCoreSum.v's ``tc_acc`` and, for
    ``ref="operands"``, ``tc_acc_op``): the exact products in blocks of ``block`` (one MMA
    instruction's K), each block with the running accumulator aligned to a reference exponent
    ``E`` keeping the bits down to ``2^(E - bits + 1)`` (``bits=None``: exactly), the dropped bits
    cut toward zero (``align="trunc"``) or down (``"floor"``), the block's sum rounded to float32
    by ``out`` ("nearest" even or "truncate"). ``E`` is the exponent of the block's largest term
    (``ref="term"``: Fasi et al.'s V100 / A100 model) or the largest of the accumulator's exponent
    and the products' operand exponent sums ``e(a_i) + e(b_i)`` (``ref="operands"``, ``e(x)`` =
    floor(log2 |x|), zero terms left out): a product's significand is in [1, 4), so its leading
    bit may be one above the reference and the kept bits relative to the largest term are then
    ``bits + 1``. ``Accumulation(1, None, "trunc", "nearest")`` is a chain of fused
    multiply-adds (IEEE float32). Subnormal operands and results are not modelled.

    Identified on an H100 (2026-12-06, torch 2.11, Triton 3.6; 64 x 64 tiles, so wgmma; the rows
    of ``dot_test_vectors(K, fmt, random=2048, seed=K)`` as it was before the ``1.5 * 1.5`` probes
    and 1024 cancellation probes, K = 16, 32, 64; tests/verification/data/tensor_core_h100.json
    keeps a sample), bit for bit on every row (5316 at K = 16, 5928 at K = 32 and 64):

    * bf16 operands: ``Accumulation(16, 26, "trunc", "truncate", "operands")``: blocks of 16
      (wgmma's K for 16-bit operands), the accumulator aligned with the products, 2 bits below
      float32's 24 kept from the reference exponent, truncation toward zero, the block's sum
      truncated; the K of a ``tl.dot`` chained in blocks of 16 from ``c``;
    * float32 "tf32": ``Accumulation(8, 26, "trunc", "truncate", "operands")`` (wgmma's K = 8);
    * float32 "ieee": the fma chain;
    * "tf32x3": :func:`emulate_tf32x3` with the tf32 model, low parts read by truncation,
      schedule "chain(0)+c" in the order (0, 1, 2) (Triton 3.6's F32DotTC: lo a . hi b from 0,
      then hi a . lo b, then hi a . hi b, then ``+ c`` in float32).

    This is Khattak and Mikaitis's H100 model (github.com/north-numerical-computing/
    MATLAB-tensor-core, models/H100TC.m: fma 16 / 8, neab = 2, final rounding rz, the exponents of
    the products taken before their normalisation). The model of the old candidates (``ref="term"``,
    blocks 1..K, 23..35 kept bits, trunc / floor, nearest / truncate) matched every Fasi probe with
    blocks of 16 and 26 bits (b = 1 there: every product's significand is below 2) but failed
    263 of the 5316 bf16 K = 16 rows (random ones whose largest product has a significand >= 2,
    where it keeps one bit fewer); no block size, kept bits or rounding of that family matched,
    for bf16 or tf32. Also refuted on the bf16 K = 32 rows (blocks of 16, 26 bits from the
    operands' exponents): the accumulator left out of the reference exponent (1378 of 5928 rows
    differ), added after the products' exact aligned sum (2230), added in float32 to the truncated
    block sum (2050); for "tf32x3", low parts read to nearest (even or away) or the chain started
    from ``c`` ("chain(c)", Tf32Product.v's reading)."""

    block: int
    bits: int | None
    align: str
    out: str
    ref: str = "term"

    def __post_init__(self) -> None:
        if self.ref not in ("term", "operands"):
            raise ValueError(f"ref must be 'term' or 'operands', got {self.ref!r}")

    def describe(self) -> str:
        if self.block == 1 and self.bits is None and self.out == "nearest":
            return "fma chain (round to nearest)"
        if self.bits is None:
            kept = "exact alignment"
        elif self.ref == "operands":
            kept = f"aligned to {self.bits} bits of the largest operand exponent sum ({self.align})"
        else:
            kept = f"aligned to {self.bits} bits ({self.align})"
        return f"blocks of {self.block}, {kept}, output {self.out}"


def accumulation_candidates(max_block: int) -> list[Accumulation]:
    """The models tried: blocks 1, 2, 4, ... up to ``max_block``; exact alignment or 23..35 kept
    bits, truncated or floored, from the largest term or the operands' exponents; output to
    nearest or truncated."""
    out = []
    block = 1
    while block <= max_block:
        for o in ("nearest", "truncate"):
            out.append(Accumulation(block, None, "trunc", o))
            for ref in ("term", "operands"):
                for bits in range(23, 36):
                    for align in ("trunc", "floor"):
                        out.append(Accumulation(block, bits, align, o, ref))
        block *= 2
    return out


def _split(x: float) -> tuple[int, int]:
    """(m, e) with x = m 2^e exactly (m = 0 for 0)."""
    if x == 0:
        return 0, 0
    f, e = math.frexp(x)
    return int(f * (1 << 53)), e - 53


def _round24(s: int, q: int, out: str) -> float:
    """The float32 (24 bits, no under/overflow) of ``s 2^q`` rounded by ``out``."""
    if s == 0:
        return 0.0
    sign, a = (-1 if s < 0 else 1), abs(s)
    shift = a.bit_length() - 24
    if shift > 0:
        r, a = a & ((1 << shift) - 1), a >> shift
        if out == "nearest" and (r > 1 << (shift - 1) or (r == 1 << (shift - 1) and a & 1)):
            a += 1
        q += shift
    return math.ldexp(sign * a, q)


def _exponent(x: float) -> int:
    """floor(log2 |x|) of a nonzero ``x``."""
    return math.frexp(x)[1] - 1


def _block(model: Accumulation, c: float, a: Sequence[float], b: Sequence[float]) -> float:
    """One block: ``c + sum a_i b_i`` as ``model`` accumulates it (zero terms left out)."""
    terms = [(c, _exponent(c))] if c != 0 else []
    terms += [(x * y, _exponent(x) + _exponent(y)) for x, y in zip(a, b) if x * y != 0]
    parts = [(*_split(t), e) for t, e in terms]
    if not parts:
        return 0.0
    if model.bits is None:
        q = min(e for _, e, _ in parts)
    elif model.ref == "operands":
        q = max(r for _, _, r in parts) - model.bits + 1
    else:
        q = max(e + abs(m).bit_length() - 1 for m, e, _ in parts) - model.bits + 1
    s = 0
    for m, e, _ in parts:
        if e >= q:
            s += m << (e - q)
        elif model.align == "floor":
            s += m >> (q - e)
        else:
            s += (abs(m) >> (q - e)) * (1 if m > 0 else -1)
    return _round24(s, q, model.out)


def emulate_dot(model: Accumulation, a: Sequence[float], b: Sequence[float], c: float) -> float:
    """``c + sum a_i b_i`` accumulated as ``model`` says (the products exact: at most 53 bits)."""
    acc = c
    for k0 in range(0, len(a), model.block):
        acc = _block(model, acc, a[k0 : k0 + model.block], b[k0 : k0 + model.block])
    return acc


def _round_bits(x: torch.Tensor, bits: int, mode: str) -> torch.Tensor:
    """float32 ``x`` with its significand cut to ``bits`` bits: "trunc" (toward zero), "rne"
    (nearest, ties to even) or "rna" (nearest, ties away: ``cvt.rna.tf32.f32``)."""
    drop = 24 - bits
    i = x.contiguous().view(torch.int32).to(torch.int64)
    mag, sign = i & 0x7FFFFFFF, i & ~0x7FFFFFFF
    if mode == "rne":
        mag = mag + (1 << (drop - 1)) - 1 + ((mag >> drop) & 1)
    elif mode == "rna":
        mag = mag + (1 << (drop - 1))
    elif mode != "trunc":
        raise ValueError(f"mode must be 'trunc', 'rne' or 'rna', got {mode!r}")
    return ((mag >> drop) << drop | sign).to(torch.int32).view(torch.float32)


def dot_test_vectors(k: int, fmt: str, *, seed: int = 0, random: int = 256) -> list[tuple[list, list, float]]:
    """Test vectors (a, b, c) of length ``k`` whose entries are ``fmt`` numbers ("bfloat16",
    "tf32" or "float32"), after Fasi, Higham, Mikaitis and Pranesh 2021: a term 1 (the
    accumulator or the product at position j) with small terms ``+-m 2^-g`` (m in 1, 1.5, 1.75;
    g = 20..36) at every other position or at one position, which separate the block size, the
    kept bits, truncation from flooring and the output rounding; the product ``1.5 * 1.5`` at
    position j with the small terms elsewhere (its leading bit one above its operands' exponent
    sum: separates :class:`Accumulation`'s ``ref``); then ``random`` random vectors with exponents
    spread over 2^-8..2^8."""
    if k < 1 or fmt not in ("bfloat16", "tf32", "float32"):
        raise ValueError(f"k must be >= 1 and fmt one of bfloat16, tf32, float32, got {k}, {fmt!r}")
    vecs: list[tuple[list, list, float]] = []
    ones = [1.0] * k
    positions = sorted({0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, k - 1} & set(range(k)))
    for g in range(20, 37):
        for m in (1.0, 1.5, 1.75):
            for sign in (1.0, -1.0):
                small = sign * m * 2.0**-g
                vecs.append(([small] * k, ones, 1.0))
                vecs.append(([small] * k, ones, -1.0))
                for j in positions:
                    a = [small] * k
                    a[j] = 1.0
                    vecs.append((a, ones, 0.0))
                    one = [0.0] * k
                    one[j] = small
                    vecs.append((one, ones, 1.0))
                    a = [small] * k
                    a[j] = 1.5
                    vecs.append((a, ones[:j] + [1.5] + ones[j + 1 :], 0.0))
    gen = torch.Generator().manual_seed(seed)
    dtype = torch.bfloat16 if fmt == "bfloat16" else torch.float32
    for _ in range(random):
        a, b = (
            torch.randn(k, generator=gen) * torch.exp2(torch.randint(-8, 9, (k,), generator=gen).float())
            for _ in range(2)
        )
        c = torch.randn(1, generator=gen) * 2.0 ** int(torch.randint(-4, 5, (1,), generator=gen))
        a, b = a.to(dtype).float(), b.to(dtype).float()
        if fmt == "tf32":
            a, b = _round_bits(a, 11, "rne"), _round_bits(b, 11, "rne")
        vecs.append((a.tolist(), b.tolist(), c.item()))
    return vecs


def identify_accumulation(
    dot: Callable[[list[tuple[list, list, float]]], list[float]],
    vectors: list[tuple[list, list, float]],
    candidates: Iterable[Accumulation],
) -> list[Accumulation]:
    """The candidates that give ``dot(vectors)`` (the device's results, float32 values) bit for
    bit on every vector (empty: none does)."""
    got = dot(vectors)
    left = []
    for model in candidates:
        if all(emulate_dot(model, a, b, c) == y for (a, b, c), y in zip(vectors, got)):
            left.append(model)
    return left


def tf32_readings(read: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> set[str]:
    """How a TF32 product may read the float32 ``x`` (``read(x)`` = the single product ``x * 1``):
    the modes among "trunc" (the low 13 bits dropped), "rne" and "rna" that give ``read(x)`` bit
    for bit on every input (several when the inputs do not tell them apart, none when no mode does)."""
    y = read(x).view(torch.int32)
    return {mode for mode in ("trunc", "rne", "rna") if torch.equal(y, _round_bits(x, 11, mode).view(torch.int32))}


def tf32_reading_probes(device: torch.device | str) -> torch.Tensor:
    """float32 numbers of +-[1, 2) that tell the TF32 readings apart whatever else is sampled: for
    each kept pattern with an even and an odd last kept bit, the dropped 13 bits just below half
    (all three readings agree), exactly half (a tie: "rne" and "rna" differ on an even kept bit)
    and just above half ("trunc" differs from both)."""
    kept = torch.tensor([0, 1, 2, 3, 1022, 1023], dtype=torch.int64, device=device) << 13
    low = torch.tensor([0x0FFF, 0x1000, 0x1001], dtype=torch.int64, device=device)
    mag = (0x3F800000 + kept[:, None] + low[None, :]).reshape(-1)
    bits = torch.cat([mag, mag - (1 << 32) + (1 << 31)])  # the negative twins: sign bit set, as int32
    return bits.to(torch.int32).view(torch.float32)


#: How the three TF32 dots of a 3xTF32 dot are chained (products 0: lo a . hi b, 1: hi a . lo b,
#: 2: hi a . hi b, in the given order): "chain(c)" each from the previous result, the first from
#: the accumulator c (Tf32Product.v's reading of Triton's F32DotTC); "chain(0)+c" the same from 0,
#: then c added in float32 (later Triton versions); "hi(c)+lo" the high dot from c and the two low
#: ones chained from 0, then added; "hi(0)+lo+c" both from 0, added, then c.
TF32X3_SCHEDULES = ("chain(c)", "chain(0)+c", "hi(c)+lo", "hi(0)+lo+c")
_TF32X3_ORDERS = ((0, 1, 2), (1, 0, 2), (0, 2, 1), (1, 2, 0), (2, 0, 1), (2, 1, 0))


def _add32(x: float, y: float) -> float:
    """float32 ``x + y`` rounded to nearest even (exactly)."""
    return _block(Accumulation(1, None, "trunc", "nearest"), x, [y], [1.0])


def emulate_tf32x3(
    model: Accumulation,
    read: str,
    schedule: str,
    order: Sequence[int],
    a: Sequence[float],
    b: Sequence[float],
    c: float,
) -> float:
    """Tf32Product.v's 3xTF32 dot ``c + a . b``: ``hi = rna(x)`` (11 bits), ``lo = read(x - hi)``, the
    three TF32 dots accumulated by ``model``, chained by ``schedule`` (:data:`TF32X3_SCHEDULES`) in
    ``order`` (for the split schedules, the order of the two low dots)."""
    ta, tb = torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)
    ha, hb = _round_bits(ta, 11, "rna"), _round_bits(tb, 11, "rna")
    la, lb = _round_bits(ta - ha, 11, read), _round_bits(tb - hb, 11, read)
    pairs = [(x.tolist(), y.tolist()) for x, y in ((la, hb), (ha, lb), (ha, hb))]

    def chain(indices: Sequence[int], acc: float) -> float:
        for i in indices:
            acc = emulate_dot(model, *pairs[i], acc)
        return acc

    if schedule == "chain(c)":
        return chain(order, c)
    if schedule == "chain(0)+c":
        return _add32(chain(order, 0.0), c)
    low = chain([i for i in order if i != 2], 0.0)
    if schedule == "hi(c)+lo":
        return _add32(chain([2], c), low)
    if schedule == "hi(0)+lo+c":
        return _add32(_add32(chain([2], 0.0), low), c)
    raise ValueError(f"schedule must be one of {TF32X3_SCHEDULES}, got {schedule!r}")


def tf32x3_candidates(model: Accumulation) -> list[tuple[str, tuple[int, ...]]]:
    """The (schedule, order) pairs :func:`identify_tf32x3` tries with a TF32 ``model``: every order of
    the three dots for the chained schedules, both orders of the two low dots for the split ones."""
    return [
        (schedule, order)
        for schedule in TF32X3_SCHEDULES
        for order in (_TF32X3_ORDERS if schedule.startswith("chain") else _TF32X3_ORDERS[:2])
    ]


def _cancelling_pairs(k: int, gen: torch.Generator) -> tuple[list, list, float]:
    """A float32 vector pair whose high (rna, 11-bit) products cancel in pairs of positions: ``a`` =
    ``(h + l, h - l')``, ``b`` = ``(g + m, -(g - m'))`` with ``h``, ``g`` of 11 bits and low parts
    3/4 to 1 times ``2^-12`` of them, so the two low dots (every term of one sign: their sum about
    ``2k 2^-12`` of a high product) are what the result keeps, down to the high dot's alignment,
    where their order shows; ``c`` = 0 or a random number (an odd ``k``: the last position 0)."""
    n = k // 2

    def tf32() -> torch.Tensor:
        e = torch.randint(-1, 2, (n,), generator=gen).float()
        return _round_bits((1 + torch.rand(n, generator=gen)) * torch.exp2(e), 11, "trunc")

    def low(x: torch.Tensor) -> torch.Tensor:
        return x * 2.0**-12 * (1 - torch.rand(n, generator=gen) / 4)

    h, g = tf32(), tf32()
    a = torch.stack([h + low(h), h - low(h)], 1).reshape(-1).tolist() + [0.0] * (k % 2)
    b = torch.stack([g + low(g), -(g - low(g))], 1).reshape(-1).tolist() + [0.0] * (k % 2)
    c = torch.randn(1, generator=gen).item() * 2.0**-6 if torch.rand(1, generator=gen).item() < 0.5 else 0.0
    return a, b, c


def tf32x3_probe_vectors(
    k: int, models: Iterable[Accumulation], read: str, *, seed: int = 1, tries: int = 4096
) -> list[tuple[list, list, float]]:
    """float32 vectors (a, b, c) of length ``k`` that separate, for each TF32 ``model``, every two
    of its :func:`tf32x3_candidates` (``read``: the low parts' reading): on each such pair, at least
    one vector on which :func:`emulate_tf32x3` differs. Found deterministically (``seed``) among
    random vectors and vectors whose high products cancel (:func:`_cancelling_pairs`: there the
    order of the two low dots shows, which the random ones leave together), a vector kept when it
    splits candidates every earlier one left together; RuntimeError when ``tries`` vectors leave
    two together."""
    if k < 2:
        raise ValueError(f"k must be >= 2, got {k}")
    gen = torch.Generator().manual_seed(seed)
    randoms = dot_test_vectors(k, "float32", seed=seed, random=tries // 4 + 1)[-(tries // 4 + 1) :]
    # per model, the classes of candidates no kept vector has told apart
    classes = {m: [tf32x3_candidates(m)] for m in dict.fromkeys(models)}
    kept: list[tuple[list, list, float]] = []
    for i in range(tries):
        if all(len(cl) == 1 for groups in classes.values() for cl in groups):
            return kept
        v = randoms[i // 4] if i % 4 == 0 else _cancelling_pairs(k, gen)
        split = False
        for m, groups in classes.items():
            refined = []
            for cl in groups:
                by: dict[float, list] = {}
                for sched, order in cl:
                    by.setdefault(emulate_tf32x3(m, read, sched, order, *v), []).append((sched, order))
                refined += by.values()
                split |= len(by) > 1
            classes[m] = refined
        if split:
            kept.append(v)
    left = {m.describe(): [cl for cl in groups if len(cl) > 1] for m, groups in classes.items()}
    left = {m: g for m, g in left.items() if g}
    if left:
        raise RuntimeError(f"{tries} vectors of K = {k} leave 3xTF32 candidates together: {left}")
    return kept


def identify_tf32x3(
    dot: Callable[[list[tuple[list, list, float]]], list[float]],
    vectors: list[tuple[list, list, float]],
    models: Iterable[Accumulation],
    read: str,
) -> list[dict[str, Any]]:
    """The (TF32 model, schedule, order) combinations (:func:`tf32x3_candidates`) under which
    :func:`emulate_tf32x3` gives ``dot(vectors)`` (the device's 3xTF32 results) bit for bit on every
    vector."""
    got = dot(vectors)
    out = []
    for model in models:
        for schedule, order in tf32x3_candidates(model):
            if all(emulate_tf32x3(model, read, schedule, order, a, b, c) == y for (a, b, c), y in zip(vectors, got)):
                out.append(dict(model=dataclasses.asdict(model), schedule=schedule, order=list(order)))
    return out


# ---------------------------------------------------------------------------
# The device's functions
# ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _dot_probe():
    """A Triton kernel: for each group of T vectors, ``C + A @ B^T`` of their [T, K] rows by
    ``tl.dot`` (bf16 operands, or float32 at ``PREC``); the diagonal is each vector's dot."""
    import triton
    import triton.language as tl

    @triton.jit
    def probe(
        A, B, C, OUT, K: tl.constexpr, T: tl.constexpr, PREC: tl.constexpr, BF16: tl.constexpr, UPCAST: tl.constexpr
    ):
        p = tl.program_id(0)
        rows = p * T + tl.arange(0, T)
        cols = tl.arange(0, K)
        a = tl.load(A + rows[:, None] * K + cols[None, :])
        bt = tl.load(B + rows[:, None] * K + cols[None, :])
        acc = tl.load(C + rows)[:, None] + tl.zeros((T, T), dtype=tl.float32)
        if UPCAST:  # the interpreter's bf16 dot is wrong: the kernels' _dot upcasts there too
            d = tl.dot(a.to(tl.float32), tl.trans(bt.to(tl.float32)), acc, input_precision="ieee")
        elif BF16:
            d = tl.dot(a, tl.trans(bt), acc)
        else:
            d = tl.dot(a, tl.trans(bt), acc, input_precision=PREC)
        tl.store(OUT + p * T * T + tl.arange(0, T)[:, None] * T + tl.arange(0, T)[None, :], d)

    return probe


def device_dot(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, precision: str) -> torch.Tensor:
    """``c_v + a_v . b_v`` for the rows of ``a``, ``b`` [n, K] (bfloat16, or float32 with
    ``precision`` "ieee" / "tf32" / "tf32x3") and ``c`` [n] float32, by one ``tl.dot`` on the
    device of ``a``: float32 [n]. On CUDA the tiles are 64 x 64 (a warpgroup's MMA on Hopper, as
    in the kernels), 16 x 16 in the interpreter, which upcasts to float32 as the kernels' ``_dot``
    does there."""
    if a.shape != b.shape or a.dim() != 2 or c.shape != a.shape[:1] or a.dtype != b.dtype:
        raise ValueError(f"a, b must be [n, K] of one dtype and c [n], got {a.shape}, {b.shape}, {c.shape}")
    if a.dtype not in (torch.bfloat16, torch.float32) or precision not in ("ieee", "tf32", "tf32x3"):
        raise ValueError(
            f"dtype must be bfloat16 or float32 and precision ieee/tf32/tf32x3, got {a.dtype}, {precision}"
        )
    n, k = a.shape
    t = 64 if a.is_cuda else 16
    pad = -n % t
    a, b = (torch.cat([t, t.new_zeros(pad, k)]).contiguous() for t in (a, b))
    c = torch.cat([c.float(), c.new_zeros(pad, dtype=torch.float32)]).contiguous()
    out = torch.empty((n + pad) // t, t, t, dtype=torch.float32, device=a.device)
    bf16 = a.dtype == torch.bfloat16
    _dot_probe()[((n + pad) // t,)](a, b, c, out, K=k, T=t, PREC=precision, BF16=bf16, UPCAST=not a.is_cuda)
    return out.diagonal(dim1=1, dim2=2).reshape(-1)[:n]


def _vector_dot(dtype: torch.dtype, precision: str, device: torch.device | str):
    def dot(vectors: list[tuple[list, list, float]]) -> list[float]:
        a, b = (torch.tensor([v[i] for v in vectors], dtype=torch.float32).to(dtype) for i in (0, 1))
        c = torch.tensor([v[2] for v in vectors], dtype=torch.float32)
        return device_dot(a.to(device), b.to(device), c.to(device), precision).cpu().tolist()

    return dot


def _tf32_read(device: torch.device | str, k: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x * 1`` as one product of a "tf32" ``tl.dot`` (the other products 0, no accumulator)."""

    def read(x: torch.Tensor) -> torch.Tensor:
        a = torch.zeros(x.numel(), k, device=device)
        a[:, 0] = x
        b = torch.zeros_like(a)
        b[:, 0] = 1.0
        return device_dot(a, b, torch.zeros(x.numel(), device=device), "tf32")

    return read


# ---------------------------------------------------------------------------
# The premises, the record
# ---------------------------------------------------------------------------


def _unary_checks(softcaps: Sequence[float]) -> list[tuple[UnaryPremise, Callable, Callable]]:
    from ojas_ref.verification import attention_error as ae
    from ojas_ref.verification import linear_cross_entropy_error as ce
    from ojas_ref.verification.bounds.attention import EXP2_ERROR, LOG2_ERROR
    from ojas_ref.verification.bounds.linear_cross_entropy import (
        LINEAR_CROSS_ENTROPY_DIV_ERROR,
        LINEAR_CROSS_ENTROPY_EXP_ERROR,
        LINEAR_CROSS_ENTROPY_LOG_ERROR,
        LINEAR_CROSS_ENTROPY_TANH_ERROR,
    )

    lo, hi = LOG_DOMAIN
    checks = [
        (
            UnaryPremise(
                "tl.exp2",
                "MixedPrecision.mp_exp2_err, on the x <= 0 the kernels evaluate (EXP2_ERROR)",
                -math.inf,
                0.0,
                True,
                EXP2_ERROR,
            ),
            lambda x: ae._run_unary("exp2", x, torch.float32),
            torch.exp2,
        ),
        (
            UnaryPremise("tl.log2", "SavedLseError.lg_err (LOG2_ERROR)", lo, hi, False, LOG2_ERROR),
            lambda x: ae._run_unary("log2", x, torch.float32),
            torch.log2,
        ),
        (
            UnaryPremise(
                "tl.exp",
                "LseLossError.ex_err (LINEAR_CROSS_ENTROPY_EXP_ERROR)",
                -math.inf,
                0.0,
                True,
                LINEAR_CROSS_ENTROPY_EXP_ERROR,
            ),
            lambda x: ce._run(x, log=False),
            torch.exp,
        ),
        (
            UnaryPremise(
                "tl.log",
                "LseLossError.lg_err (LINEAR_CROSS_ENTROPY_LOG_ERROR)",
                lo,
                hi,
                False,
                LINEAR_CROSS_ENTROPY_LOG_ERROR,
            ),
            lambda x: ce._run(x, log=True),
            torch.log,
        ),
    ]
    for cap in softcaps:
        checks.append(
            (
                UnaryPremise(
                    f"softcap tanh c={cap:g}",
                    "SoftcapError.th_err, ut = 0 (LINEAR_CROSS_ENTROPY_TANH_ERROR)",
                    -_FLT_MAX,
                    _FLT_MAX,
                    False,
                    LINEAR_CROSS_ENTROPY_TANH_ERROR,
                ),
                lambda r, cap=cap: ce.kernel_cap(r, cap),
                lambda r, cap=cap: torch.tanh(r / _f32(cap)),
            )
        )
        checks.append(
            (
                UnaryPremise(
                    f"softcap z/c c={cap:g}",
                    "SoftcapError.dv_err (LINEAR_CROSS_ENTROPY_DIV_ERROR)",
                    -_FLT_MAX,
                    _FLT_MAX,
                    True,
                    LINEAR_CROSS_ENTROPY_DIV_ERROR,
                ),
                lambda z, cap=cap: ce.kernel_divide(z, cap),
                lambda z, cap=cap: z / _f32(cap),
            )
        )
    return checks


def _entry(
    name: str, theorem: str, domain: str, inputs: int, assumed: Any, measured: Any, passed: bool | None, **detail
) -> dict[str, Any]:
    """A record entry; ``passed`` None: not checked."""
    status = "not checked" if passed is None else ("pass" if passed else "FAIL")
    return dict(
        name=name,
        theorem=theorem,
        domain=domain,
        inputs=inputs,
        assumed=assumed,
        measured=measured,
        status=status,
        **detail,
    )


def device_key() -> dict[str, str]:
    """What the record is keyed by: the GPU's name, the driver, CUDA, torch and Triton versions
    (on a machine without CUDA: the Triton interpreter)."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name()
        try:
            driver = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=driver_version",
                    "--format=csv,noheader",
                    "-i",
                    str(torch.cuda.current_device()),
                ],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            driver = "unknown (nvidia-smi failed)"
    else:
        gpu, driver = "none (Triton interpreter)", "none"
    return dict(gpu=gpu, driver=driver, cuda=str(torch.version.cuda), torch=torch.__version__, triton=triton_version)


def _commit() -> str:
    """``$OJAS_RECORD_COMMIT`` when set (a ``git archive`` snapshot run inside another checkout, as
    on the device machine, whose ``git rev-parse`` would name that checkout), else this checkout's."""
    if os.environ.get("OJAS_RECORD_COMMIT"):
        return os.environ["OJAS_RECORD_COMMIT"]
    root = Path(__file__).resolve().parents[2]
    try:
        return subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        from ojas_ref import __version__

        return f"ojas-ref {__version__} (no git checkout)"


_SAMPLES = 1 << 14  # inputs per domain in the quick mode


def _step(lo: float, hi: float, quick: bool, samples: int = _SAMPLES) -> int:
    """1, or in the quick mode an odd step leaving about ``samples`` inputs of [lo, hi] (odd: the
    low bits of the patterns vary)."""
    return max(1, float32_count(lo, hi) // samples) | 1 if quick else 1


def _check_unaries(softcaps: Sequence[float], device: str, quick: bool, chunk: int) -> Iterator[dict]:
    for premise, fn, ref in _unary_checks(softcaps):
        step = _step(premise.lo, premise.hi, quick)
        r = scan_unary(premise, fn, ref, device=device, step=step, chunk=chunk)
        assumed, measured, passed = premise.assumed, r["measured"], r["passed"]
        extra: dict[str, Any] = dict(worst_input=r["worst_input"])
        if premise.relative:
            assumed = dict(relative=premise.assumed, absolute=_TINY)
            measured = dict(relative=r["measured"], absolute_below_normal=r["measured_below_normal"])
            extra["worst_input_below_normal"] = r["worst_input_below_normal"]
        if premise.name == "tl.exp2":  # exp2_0 of Attention.Float.OnlineSoftmaxTile
            extra["exp2_0_is_1"] = fn(torch.zeros(1, device=device)).item() == 1.0
            passed = passed and extra["exp2_0_is_1"]
        yield _entry(premise.name, premise.theorem, premise.domain, r["inputs"], assumed, measured, passed, **extra)


def _check_casts(device: str, quick: bool, chunk: int) -> Iterator[dict]:
    from ojas_ref.verification import attention_error as ae

    for dtype in (torch.bfloat16, torch.float16):
        step = _step(-math.inf, math.inf, quick)
        r = scan_cast(lambda x, d=dtype: ae._run_unary("cast", x, d), dtype, device=device, step=step, chunk=chunk)
        yield _entry(
            f"cast float32->{str(dtype)[6:]}",
            "the bf16 / fp16 instances of MixedPrecision.v: round to nearest even",
            "every float32 (and +-inf)",
            r["inputs"],
            "nearest",
            r["measured"],
            r["passed"],
        )


def _check_sum_trees(device: str) -> Iterator[dict]:
    from ojas_ref.verification import linear_cross_entropy_error as ce

    for dtype in (torch.bfloat16, torch.float32):
        args = (
            f"tl.sum tree rows {str(dtype)[6:]}",
            "LseLossError.sum_ok ts Dt Bt (the rows kernel's vocabulary tile)",
        )
        if device != "cuda":
            yield _entry(
                *args,
                "the rows kernel's tile",
                0,
                "a tree of depth Dt",
                None,
                None,
                detail="identified on CUDA only (the interpreter sums with numpy)",
            )
            continue
        try:
            r = ce.tile_sum_identification(dtype, device)
        except ValueError as err:
            yield _entry(*args, "the rows kernel's tile", 0, "a tree of depth Dt", None, False, detail=str(err))
            continue
        yield _entry(
            *args,
            f"[1, {r['block_v']}] tiles",
            r["rows"],
            "a tree of depth Dt",
            dict(depth=r["depth"], layout=list(r["layout"])),
            True,
            other_matching_layouts=[list(x) for x in r["others"]],
        )


def _check_dots(device: str, quick: bool, chunk: int) -> Iterator[dict]:
    k, n_random = 32, (32 if quick else 256)
    candidates = accumulation_candidates(k)
    tf32: list[Accumulation] = []
    for label, dtype, prec, fmt in (
        ("bfloat16", torch.bfloat16, "ieee", "bfloat16"),
        ("float32 ieee", torch.float32, "ieee", "float32"),
        ("float32 tf32", torch.float32, "tf32", "tf32"),
    ):
        vectors = dot_test_vectors(k, fmt, random=n_random)
        vectors = vectors[-n_random:] + vectors[:-n_random]  # the random ones first: most models die at once
        models = identify_accumulation(_vector_dot(dtype, prec, device), vectors, candidates)
        tf32 = models if prec == "tf32" else tf32
        yield _entry(
            f"tl.dot {label}",
            "TensorCoreSum.tc_acc / tc_acc_op (block k, F bits, reference exponent, output rounding)",
            f"test vectors of K = {k}",
            len(vectors),
            "one model of TensorCoreSum.v",
            [dataclasses.asdict(m) for m in models] or "none",
            bool(models),
            detail="; ".join(m.describe() for m in models) or "no model matches bit for bit",
        )
    read, modes, n = _tf32_read(device, k), {"trunc", "rne", "rna"}, 0
    for lo, hi in ((1.0, 2.0 - 2.0**-23), (-2.0 + 2.0**-23, -1.0)):
        step = _step(lo, hi, quick, _SAMPLES // 16)  # a dot per input
        for x in float32_chunks(lo, hi, device=device, step=step, chunk=min(chunk, 1 << 20)):
            modes &= tf32_readings(read, x)
            n += x.numel()
    probes = tf32_reading_probes(device)  # a sampled (quick) domain may miss the ties and the halves
    modes &= tf32_readings(read, probes)
    n += probes.numel()
    reading = modes.pop() if len(modes) == 1 else "neither" if not modes else "/".join(sorted(modes))
    yield _entry(
        "tf32 low-part reading",
        "Tf32Product.tl_err (ul = 2^-10: truncation or rounding)",
        "every float32 in +-[1, 2)",
        n,
        "trunc, rne or rna",
        reading,
        reading in ("trunc", "rne", "rna"),
    )
    ok = reading in ("trunc", "rne", "rna")
    vectors = dot_test_vectors(k, "float32", random=n_random, seed=1)[-n_random:]
    probes = tf32x3_probe_vectors(k, tf32, reading) if ok else []  # tell every two chainings apart
    matches = identify_tf32x3(
        _vector_dot(torch.float32, "tf32x3", device), vectors + probes, tf32 if ok else [], reading
    )
    yield _entry(
        "tl.dot float32 tf32x3",
        "Tf32Product.tf32x3_dot_tc_error (hi rna, lo read, three TF32 dots; how they are chained)",
        f"random vectors of K = {k} and {len(probes)} that separate the chainings",
        len(vectors) + len(probes),
        "the 3xTF32 split of Tf32Product.v (the tf32 model, the reading)",
        matches or "none",
        bool(matches),
    )


def verify_device(
    *,
    quick: bool = False,
    softcaps: Sequence[float] = SOFTCAPS,
    chunk: int = 1 << 26,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Check every premise on this device (CUDA; with ``quick``, a sample of each domain, which
    also runs in Triton's interpreter) and return the record (see the module docstring);
    ``chunk``: inputs per pass on the device (2^26: a few GiB of device memory)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if not quick and device != "cuda":
        raise RuntimeError("the device premises are checked on a CUDA GPU; none is available (quick mode samples)")
    if any(not (isinstance(c, (int, float)) and 0 < c <= _FLT_MAX) for c in softcaps):
        raise ValueError(f"softcaps must be positive finite float32 numbers, got {softcaps!r}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    chunk = min(chunk, _SAMPLES) if quick else chunk
    premises: dict[str, dict] = {}
    checks = (
        _check_unaries(softcaps, device, quick, chunk),
        _check_casts(device, quick, chunk),
        _check_sum_trees(device),
        _check_dots(device, quick, chunk),
    )
    for what, check in zip(("unary functions", "casts", "tl.sum trees", "tl.dot"), checks):
        t0 = time.perf_counter()
        try:
            for entry in check:
                entry["seconds"] = round(time.perf_counter() - t0, 2)
                premises[entry["name"]] = entry
                log(f"  {entry['name']}: {entry['status']} ({entry['inputs']} inputs, {entry['seconds']} s)")
                t0 = time.perf_counter()
        except Exception as err:  # recorded as a failure: the other checks still run
            name = f"{what}: error"
            premises[name] = _entry(name, "-", "-", 0, "-", f"{type(err).__name__}: {err}", False)
            log(f"  {name}: {type(err).__name__}: {err}")
    return dict(
        key=device_key(),
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        ojas_commit=_commit(),
        mode="quick (sampled)" if quick else "exhaustive",
        premises=premises,
    )


def cache_dir(folder: str | os.PathLike | None = None) -> Path:
    """``folder``, else ``$OJAS_DEVICE_CACHE``, else ``~/.cache/ojas/device``."""
    return Path(folder or os.environ.get(CACHE_ENV) or "~/.cache/ojas/device").expanduser()


def _record_path(key: dict[str, str], quick: bool, folder: str | os.PathLike | None) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir(folder) / f"{digest}{'-quick' if quick else ''}.json"


def save_record(record: dict[str, Any], folder: str | os.PathLike | None = None) -> Path:
    """Write ``record`` under :func:`cache_dir` (a file per key and mode); returns its path."""
    path = _record_path(record["key"], record["mode"] != "exhaustive", folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


def load_record(
    folder: str | os.PathLike | None = None, *, key: dict[str, str] | None = None, quick: bool = False
) -> dict[str, Any] | None:
    """The record of this device and these versions (``key``, default :func:`device_key`), the
    exhaustive one unless ``quick``; None when there is none."""
    key = device_key() if key is None else key
    path = _record_path(key, quick, folder)
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    return record if record.get("key") == key else None


def checked_premises(names: Iterable[str], folder: str | os.PathLike | None = None) -> dict[str, dict]:
    """The record's entries for ``names`` on this device; ``PremisesNotChecked`` when there is no
    exhaustive record for this device and these versions or a premise is missing or was not
    checked, ``PremiseFailed`` when one failed."""
    record = load_record(folder)
    if record is None:
        key = device_key()
        raise PremisesNotChecked(
            f"no device-premise record for {key['gpu']} (driver {key['driver']}, CUDA {key['cuda']}, torch "
            f"{key['torch']}, Triton {key['triton']}) in {cache_dir(folder)}: run `ojas verify-device` first"
        )
    entries = {}
    for name in names:
        entry = record["premises"].get(name)
        if entry is None or entry["status"] == "not checked":
            raise PremisesNotChecked(f"premise {name!r} not checked on this device: run `ojas verify-device`")
        if entry["status"] != "pass":
            raise PremiseFailed(
                f"premise {name!r} FAILED on this device: measured {entry['measured']}, assumed {entry['assumed']}"
            )
        entries[name] = entry
    return entries


#: Added (also relatively) to a measured premise constant before it is rounded up to float32: the
#: float64 reference of :func:`scan_unary` (CUDA's float64 exp2 within 2 ulps, log2 within 1 ulp, of
#: results below 2^5) and its float64 arithmetic err by less than 2^-48 on an error or a relative
#: error; 2^-40 leaves a factor 2^8.
_MEASURED_MARGIN = 2.0**-40


def _float32_up(x: float) -> float:
    """The least float32 >= ``x`` (a finite ``x >= 0``)."""
    f = _f32(x)
    return f if f >= x else struct.unpack("<f", struct.pack("<I", _f32_bits(f) + 1))[0]


def premise_constants(
    names: Iterable[str], device_type: str, folder: str | os.PathLike | None = None
) -> dict[str, float]:
    """The constant each unary premise of ``names`` ("tl.exp2", "tl.log2", "tl.exp", "tl.log", the
    softcaps' of :data:`SOFTCAPS`) is to be used with on ``device_type``: the relative error for the
    relative premises (the absolute term stays ``2^-126``), the absolute one for the others.

    On CUDA, where this device's exhaustive record (:func:`load_record`, the one the GPU tests and
    ``ojas audit`` read) says the premise passed and measured it at most the assumed constant: the
    measured value plus :data:`_MEASURED_MARGIN`, rounded up to a float32, never above the assumed
    constant. Sound:
    :func:`scan_unary` ran the device's function on EVERY float32 input of the premise's domain and
    recorded the least constant for which the premise's inequality holds on all of them (the
    relative ones in Coq's form ``|f(x) - ref(x)| <= ue |ref(x)| + 2^-126``); the margin covers the
    float64 reference's own error, so the premise holds at the returned constant on that domain,
    and the theorems taking it (``mp_exp2_err``, ``lg_err``, ...) hold with it. Their side
    conditions ask only ``0 <= ue``, ``0 <= el`` and conditions monotone in them (``bL < 1``), which
    a constant at most the assumed one keeps. Elsewhere (the interpreter: the CPU callers keep the
    bounds' defaults), without a record, or when the premise failed or was not checked: the assumed
    constant (an assumption, as the bounds' defaults)."""
    premises = {p.name: p for p, _, _ in _unary_checks(SOFTCAPS)}
    names = list(names)
    for name in names:
        if name not in premises:
            raise ValueError(f"names must be unary premises, one of {sorted(premises)}; got {name!r}")
    record = load_record(folder) if device_type == "cuda" else None
    out = {}
    for name in names:
        assumed = premises[name].assumed
        out[name] = assumed
        entry = None if record is None or record.get("mode") != "exhaustive" else record["premises"].get(name)
        if entry is None or entry["status"] != "pass" or entry["domain"] != premises[name].domain:
            continue
        measured = entry["measured"]["relative"] if premises[name].relative else entry["measured"]
        if measured <= assumed:
            out[name] = min(_float32_up(measured * (1.0 + _MEASURED_MARGIN) + _MEASURED_MARGIN), assumed)
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3e}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    if isinstance(v, list):
        return "; ".join(_fmt(x) for x in v[:2]) + (f" (+{len(v) - 2})" if len(v) > 2 else "")
    return str(v)


def format_table(record: dict[str, Any]) -> str:
    """The record as a table: premise, domain, inputs checked, assumed, measured, status."""
    header = ("premise", "domain", "inputs", "assumed", "measured", "status")
    rows = [
        (
            e["name"],
            e["domain"],
            str(e["inputs"]),
            _fmt(e["assumed"]),
            _fmt(e.get("detail") or e["measured"])
            if e["name"].startswith("tl.dot") and e["status"] != "FAIL"
            else _fmt(e["measured"]),
            e["status"],
        )
        for e in record["premises"].values()
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("{:<%d}" % w for w in widths)
    return "\n".join([line.format(*header), line.format(*("-" * w for w in widths))] + [line.format(*r) for r in rows])


def failed(record: dict[str, Any]) -> list[str]:
    """The premises of ``record`` that did not pass (failed or not checked)."""
    return [name for name, e in record["premises"].items() if e["status"] != "pass"]
