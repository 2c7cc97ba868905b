"""The a-posteriori error bound of a reversible coupling stack's reconstruction
(``Ojas.Reversible.APosteriori``), evaluated exactly in rationals from measured inputs."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

from ojas_ref.verification.bounds.common import _float_up

__all__ = ["reversible_reconstruction_error_bound"]


def reversible_reconstruction_error_bound(
    local_errors: Sequence[float],
    lipschitz_f: Sequence[float],
    lipschitz_g: Sequence[float],
    output_error: float = 0.0,
) -> list[float]:
    """A-posteriori bounds on the reconstruction error of a reversible coupling stack,
    one per layer: entry ``i`` bounds max |reconstructed input - stored input| of layer
    ``i`` (max-norm, both halves) when the inverse starts within ``output_error`` of the
    stored output of the last layer.

    Evaluates ``apost_bound`` of ``Ojas.Reversible.APosteriori.vec_stack_recon_error_apost``
    (applied to the layers ``i..N-1``) by its recurrence, last layer first:

        E_N = output_error,   E_i = (1 + LF_i)(1 + LG_i) E_(i+1) + e_i,

    i.e. ``E_i = sum_(j>=i) e_j prod_(i<=k<j) (1+LF_k)(1+LG_k) + prod_(k>=i) (...) E_N``
    (``apost_bound_closed``). The inputs are measured on the run, per layer:

    * ``local_errors[i] = r_i + d_i``: ``r_i`` the max-norm distance between the step the
      code ran (rounded inverse, computed f, g) and the exact inverse, both at the
      reconstructed output the step was fed; ``d_i`` the distance between the exact
      inverse of the layer's stored output and its stored input;
    * ``lipschitz_f[i]``, ``lipschitz_g[i]``: Lipschitz constants (max-norm) of the exact
      functions, needed only at the pairs of points the run visits (``vlip_at``): G at
      the first halves of the reconstructed and stored outputs, F at the second halves
      of their exact inverses; a global constant (e.g. ``||W2||_inf ||W1||_inf`` for a
      tanh MLP) is one such.

    Nothing about the rounding is assumed (it is all in ``e_i``), so unlike
    ``Ojas.Reversible.FloatError.vec_stack_recon_error`` there is no worst-case rounding
    term and the constants are per layer. Not covered: that the measured ``e_i`` and
    constants are correct (a test measures them against a higher-precision reference,
    which stands in for exact arithmetic), and the gradient error that the reconstruction
    error causes: ``Ojas.Reversible.APosteriori.vec_stack_grad_error_apost`` bounds it
    given measured constants of each block's backward, which nothing here computes or
    evaluates. Hand formula (no oracle query): evaluated exactly in
    rationals from the floats given and rounded up (:func:`_float_up`). Raises
    ``ValueError`` on lists of different lengths or a negative or non-finite input.
    """
    if not len(local_errors) == len(lipschitz_f) == len(lipschitz_g):
        raise ValueError(
            f"local_errors, lipschitz_f, lipschitz_g must have one length, got "
            f"{len(local_errors)}, {len(lipschitz_f)}, {len(lipschitz_g)}"
        )
    vals = [float(output_error), *map(float, local_errors), *map(float, lipschitz_f), *map(float, lipschitz_g)]
    if not all(math.isfinite(v) and v >= 0.0 for v in vals):
        raise ValueError("local errors, Lipschitz constants and output_error must be finite and >= 0")
    e = Fraction(float(output_error))
    bounds: list[float] = []
    for err, lf, lg in zip(reversed(local_errors), reversed(lipschitz_f), reversed(lipschitz_g)):
        e = (1 + Fraction(float(lf))) * (1 + Fraction(float(lg))) * e + Fraction(float(err))
        bounds.append(_float_up(e))
    return bounds[::-1]
