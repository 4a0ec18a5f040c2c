"""The one-row matmul template (`gemv_template`): a decode step's projections, every PU streaming its own slice.

Inductor's mm template gives each program a power-of-two panel of BLOCK_N output columns, so a GEMV's grid is
`N / BLOCK_N` programs: GPT-2's QKV (N 2304) in 64-column panels is 36 programs on 64 PUs, its LM head (N 50257)
in 64-column panels 786 programs, 12.3 waves. A GEMV is bound by streaming the weight, so that leaves a third
of the banks idle or one PU in eight doing a thirteenth program.

`gemv_template` gives program `p` of `ceil(N / SHARE)` (SHARE = `ceil(N / num_pus)`) the contiguous output columns
`[p * SHARE, min((p + 1) * SHARE, N))`: every PU gets an even share of the weight's rows (a weight stored
[N, K], `x @ w.T`, gives each program one contiguous range of bytes, which the "auto" placement puts in that
PU's bank). The share is processed in BLOCK_N-column blocks (a power of two; the last block of a share is
masked, and masked columns move no bytes), each block over K in BLOCK_K steps: the activation's BLOCK_K slice
and the weight's tile per step (multi-buffered by `num_stages`), an fp32 accumulator of BLOCK_N in the
scratchpad. A column-major B (`B_COLUMNS`, the `w.T` of a weight stored [N, K]) is loaded as [BLOCK_N, BLOCK_K]
tiles of the weight's rows and multiplied by the activation as a [BLOCK_K, 1] column, so no tile is transposed
(the mm template's [BLOCK_K, BLOCK_N] tile of it is, by the vector unit); a row-major B as [BLOCK_K, BLOCK_N]
tiles times the [1, BLOCK_K] row. Each block's output is stored through Inductor's `store_output` (inside the
column-block loop), so epilogue fusion (the addmm bias, gelu, a residual add, the dtype cast) works as with the
mm template, and so does prologue fusion (a layer norm's normalisation, an embedding lookup and add, applied to
the activation as it is loaded).

`norm_gemv_template(rms, has_bias)` is the same source with a norm of A inside (`NORM`, see `norm_gemv.py`):
every program loads A's whole row (`K_POW2` wide, masked), the norm's weight and bias and (with one column block,
BLOCK_N >= SHARE) the linear's bias back to back (one wait), computes the layer norm's mean and rstd (or RMSNorm's
rstd) in fp32; with BLOCK_K < K_POW2 each K step normalises its own slice of the row after issuing its weight
load (the slices of the deviations, the norm's weight and bias taken by a where and a sum over their
[K_POW2 / BLOCK_K, BLOCK_K] views: vector work under the next step's weight DMA, not before the first one), else
the row is normalised once and is the A tile of one K step. The linear's bias (`HAS_BIAS`) is added to the
accumulator before `store_output`. `norm_gemv.py` picks one column block of the whole share over K steps
(`gemm.norm_gemv_tiles`).

It is offered for `mm` and `addmm` with one row known at compile time (`applies`) next to the mm template's
tiles, with the same extra arguments (epilogue, prefix arguments) as the mm template; `gemm.estimate_gemv`
models it in the same terms as `gemm.estimate` models the mm template, and `NMPChoices` keeps whichever is
modelled faster.
"""

from __future__ import annotations

import functools
from typing import Any

from torch._inductor.select_algorithm import SymbolicGridFn, TritonTemplate

__all__ = ["gemv_template", "norm_gemv_template", "applies", "GEMV_OPS"]

GEMV_OPS = ("mm", "addmm")


@SymbolicGridFn
def _gemv_grid(m: Any, n: Any, meta: dict[str, Any], *, cdiv: Any) -> tuple[Any, int, int]:
    return (cdiv(n, meta["SHARE"]), 1, 1)


_SOURCE = r"""
{% set NORM = NORM is defined and NORM %}
{% set HAS_BIAS = HAS_BIAS is defined and HAS_BIAS %}
{% set RMS = RMS is defined and RMS %}
{{def_kernel("A", "B")}}
    M = {{size("A", 0)}}
    N = {{size("B", 1)}}
    K = {{size("A", 1)}}
    if M * N == 0:
        # early exit due to zero-size input(s)
        return
    stride_am = {{stride("A", 0)}}
    stride_ak = {{stride("A", 1)}}
    stride_bk = {{stride("B", 0)}}
    stride_bn = {{stride("B", 1)}}
{% if NORM %}
    stride_nw = {{stride("NW", 0)}}
{% if not RMS %}
    stride_nb = {{stride("NB", 0)}}
{% endif %}
{% endif %}
{% if HAS_BIAS %}
    stride_bias = {{stride("BIAS", 0)}}
{% endif %}

    # this program's share of the output columns: [n_start, n_end)
    pid = tl.program_id(0).to(INDEX_DTYPE)
    n_start = pid * SHARE
    n_end = tl.minimum(n_start + SHARE, N)
    rm = tl.arange(0, 1).to(INDEX_DTYPE)
    offs_k = tl.arange(0, BLOCK_K).to(INDEX_DTYPE)
{% if NORM %}
    # the layer norm's statistics over A's whole row, by every program (it reads all of A anyway)
    offs_r = tl.arange(0, K_POW2).to(INDEX_DTYPE)
    # every load of the prologue first, back to back: their DMAs are issued together, one wait
    x_in = tl.load(A + offs_r * stride_ak, mask=offs_r < K, other=0.0)
    nw_in = tl.load(NW + offs_r * stride_nw, mask=offs_r < K, other=0.0)
{% if not RMS %}
    nb_in = tl.load(NB + offs_r * stride_nb, mask=offs_r < K, other=0.0)
{% endif %}
{% if HAS_BIAS and BLOCK_N >= SHARE %}
    # one column block (the whole share): the linear's bias too
    rn_bias = n_start + tl.arange(0, BLOCK_N).to(INDEX_DTYPE)
    bias_in = tl.load(BIAS + rn_bias * stride_bias, mask=rn_bias < n_end, other=0.0)
{% endif %}
    x_row = x_in.to(tl.float32)
{% if RMS %}
    # RMSNorm: no mean; the scaled row is rounded to A's dtype before the weight, as `(x * rstd).to(dtype) * w`
    rstd = tl.rsqrt(tl.sum(x_row * x_row, 0) / K + EPS)
{% else %}
    mean = tl.sum(x_row, 0) / K
    x_dev = tl.where(offs_r < K, x_row - mean, 0.0)
    rstd = tl.rsqrt(tl.sum(x_dev * x_dev, 0) / K + EPS)
{% endif %}
{% if BLOCK_K < K_POW2 %}
    # K steps: step k normalises its BLOCK_K slice of the row (the same elementwise ops and roundings as the whole
    # row), vector work that overlaps the step's weight DMA instead of running before the first one. A slice is
    # taken from the row in the scratchpad as [K_POW2 // BLOCK_K, BLOCK_K], its row k selected by a where and a
    # sum over the steps (exact: one term is not zero); nothing is reloaded
    step_ids = tl.arange(0, K_POW2 // BLOCK_K)
{% if RMS %}
    x_steps = tl.reshape(x_row, (K_POW2 // BLOCK_K, BLOCK_K))
{% else %}
    x_steps = tl.reshape(x_dev, (K_POW2 // BLOCK_K, BLOCK_K))
    nb_steps = tl.reshape(nb_in, (K_POW2 // BLOCK_K, BLOCK_K))
{% endif %}
    nw_steps = tl.reshape(nw_in, (K_POW2 // BLOCK_K, BLOCK_K))
{% else %}
    # one K step: the row is normalised here, once, rounded as eager rounds it
{% if RMS %}
    a_row = (x_row * rstd).to(A.dtype.element_ty) * nw_in
{% else %}
    a_row = (x_dev * rstd * nw_in.to(tl.float32) + nb_in.to(tl.float32)).to(A.dtype.element_ty)
{% endif %}
{% endif %}
{% endif %}
    for n_off in range(0, SHARE, BLOCK_N):
        rn = n_start + n_off + tl.arange(0, BLOCK_N).to(INDEX_DTYPE)
        n_mask = rn < n_end
{% if B_COLUMNS %}
        # B's columns are the weight's contiguous rows: [BLOCK_N, BLOCK_K] weight tiles times the activation as a
        # column, no transposed tile
        acc = tl.zeros((BLOCK_N, 1), dtype=ACC_TYPE)
        for k_idx in range(0, tl.cdiv(K, BLOCK_K)):
            {% if not EVEN_K %}
            a_mask = offs_k[:, None] < (K - k_idx * BLOCK_K)
            b_mask = (offs_k[None, :] < (K - k_idx * BLOCK_K)) & n_mask[:, None]
            {% else %}
            b_mask = n_mask[:, None]
            {% endif %}
            idx_m = rm[None, :]
            idx_n = offs_k[:, None] + (k_idx * BLOCK_K)
{% if NORM and BLOCK_K == K_POW2 %}
            a = a_row[:, None]
{% elif not NORM %}
            {{load_input("A", "a", ("idx_m", "idx_n"), mask=None if EVEN_K else "a_mask",
                         indent_width=12, index_shape=("BLOCK_K", "1"))}}
{% endif %}

            idx_m = offs_k[None, :] + (k_idx * BLOCK_K)
            idx_n = rn[:, None]
            {{load_input("B", "b", ("idx_m", "idx_n"), mask="b_mask",
                         indent_width=12, index_shape=("BLOCK_N", "BLOCK_K"))}}
{% if NORM and BLOCK_K < K_POW2 %}
            # the slice after the step's weight load: its DMA is issued before the vector work
            in_step = step_ids[:, None] == k_idx
            x_k = tl.sum(tl.where(in_step, x_steps, 0.0), 0)
            nw_k = tl.sum(tl.where(in_step, nw_steps, 0.0), 0).to(NW.dtype.element_ty)
{% if RMS %}
            a = ((x_k * rstd).to(A.dtype.element_ty) * nw_k)[:, None]
{% else %}
            nb_k = tl.sum(tl.where(in_step, nb_steps, 0.0), 0).to(NB.dtype.element_ty)
            a = (x_k * rstd * nw_k.to(tl.float32) + nb_k.to(tl.float32)).to(A.dtype.element_ty)[:, None]
{% endif %}
{% endif %}

            acc += tl.dot(b, a, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)

        idx_m = rm[None, :]
        idx_n = rn[:, None]
        mask = (idx_m < M) & (idx_n < n_end)

{% if HAS_BIAS and BLOCK_N >= SHARE %}
        acc += bias_in[:, None].to(ACC_TYPE)
{% elif HAS_BIAS %}
        acc += tl.load(BIAS + rn[:, None] * stride_bias, mask=n_mask[:, None], other=0.0).to(ACC_TYPE)
{% endif %}
        # inductor generates a suffix
        {{store_output(("idx_m", "idx_n"), "acc", "mask", indent_width=8, val_shape=("BLOCK_N", "1"))}}
{% else %}
        acc = tl.zeros((1, BLOCK_N), dtype=ACC_TYPE)
        for k_idx in range(0, tl.cdiv(K, BLOCK_K)):
            {% if not EVEN_K %}
            a_mask = offs_k[None, :] < (K - k_idx * BLOCK_K)
            b_mask = (offs_k[:, None] < (K - k_idx * BLOCK_K)) & n_mask[None, :]
            {% else %}
            b_mask = n_mask[None, :]
            {% endif %}
            idx_m = rm[:, None]
            idx_n = offs_k[None, :] + (k_idx * BLOCK_K)
{% if NORM and BLOCK_K == K_POW2 %}
            a = a_row[None, :]
{% elif not NORM %}
            {{load_input("A", "a", ("idx_m", "idx_n"), mask=None if EVEN_K else "a_mask",
                         indent_width=12, index_shape=("1", "BLOCK_K"))}}
{% endif %}

            idx_m = offs_k[:, None] + (k_idx * BLOCK_K)
            idx_n = rn[None, :]
            {{load_input("B", "b", ("idx_m", "idx_n"), mask="b_mask",
                         indent_width=12, index_shape=("BLOCK_K", "BLOCK_N"))}}
{% if NORM and BLOCK_K < K_POW2 %}
            # the slice after the step's weight load: its DMA is issued before the vector work
            in_step = step_ids[:, None] == k_idx
            x_k = tl.sum(tl.where(in_step, x_steps, 0.0), 0)
            nw_k = tl.sum(tl.where(in_step, nw_steps, 0.0), 0).to(NW.dtype.element_ty)
{% if RMS %}
            a = ((x_k * rstd).to(A.dtype.element_ty) * nw_k)[None, :]
{% else %}
            nb_k = tl.sum(tl.where(in_step, nb_steps, 0.0), 0).to(NB.dtype.element_ty)
            a = (x_k * rstd * nw_k.to(tl.float32) + nb_k.to(tl.float32)).to(A.dtype.element_ty)[None, :]
{% endif %}
{% endif %}

            acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)

        idx_m = rm[:, None]
        idx_n = rn[None, :]
        mask = (idx_m < M) & (idx_n < n_end)

{% if HAS_BIAS and BLOCK_N >= SHARE %}
        acc += bias_in[None, :].to(ACC_TYPE)
{% elif HAS_BIAS %}
        acc += tl.load(BIAS + rn[None, :] * stride_bias, mask=n_mask[None, :], other=0.0).to(ACC_TYPE)
{% endif %}
        # inductor generates a suffix
        {{store_output(("idx_m", "idx_n"), "acc", "mask", indent_width=8, val_shape=("1", "BLOCK_N"))}}
{% endif %}
"""

gemv_template = TritonTemplate(
    name="nmp_gemv",
    grid=_gemv_grid,
    source=_SOURCE,
    cache_codegen_enabled_for_template=True,
    prologue_loads_all_inputs=True,
)


@functools.cache
def norm_gemv_template(rms: bool, has_bias: bool) -> TritonTemplate:
    """The one-row template with a norm of A computed inside (`NORM`; `RMS`: RMSNorm, else layer norm): inputs A
    (the un-normalised row), B, the norm's weight NW and (layer norm) bias NB, and with `has_bias` the linear's
    bias BIAS (added before the epilogue). A is loaded directly (it must be a realized buffer: no prologue fusion
    into it), B through `load_input`."""
    names = '"A", "B", "NW"' + ('' if rms else ', "NB"') + (', "BIAS"' if has_bias else "")
    return TritonTemplate(
        name="nmp_" + ("rms" if rms else "layer") + "_norm_gemv" + ("_bias" if has_bias else ""),
        grid=_gemv_grid,
        source=_SOURCE.replace('{{def_kernel("A", "B")}}', "{{def_kernel(" + names + ")}}", 1),
        cache_codegen_enabled_for_template=True,
    )


def applies(op_name: str, kernel_inputs: Any) -> bool:
    """Whether the template is offered for this matmul: `mm`/`addmm` whose row count is 1 at compile time (the
    template computes one row: an M that is only hinted 1, a dynamic dimension, would be wrong for other
    values)."""
    from torch._inductor.virtualized import V

    if op_name not in GEMV_OPS:
        return False
    return bool(V.graph.sizevars.statically_known_equals(kernel_inputs.mnk_symbolic()[0], 1))
