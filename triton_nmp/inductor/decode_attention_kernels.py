"""The Triton kernels of decode attention (`triton_nmp.inductor.decode_attention` explains the design and the
pass that inserts them): `_partial` and `_partial_runs` compute the chunks' partials, `_combine` adds them up.
Kept apart from the graph pass so that each module stays small; their names are what profiles show."""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["_partial", "_partial_runs", "_combine"]


@triton.jit
def _round(x, DT: tl.constexpr):
    """`x` (fp32) rounded to the graph's dtype code `DT` (0 fp16, 1 bf16, 2 fp32) and back."""
    if DT == 0:
        x = x.to(tl.float16).to(tl.float32)
    elif DT == 1:
        x = x.to(tl.bfloat16).to(tl.float32)
    return x


@triton.jit
def _partial(q_ptr, k_ptr, v_ptr, mask_ptr, o_ptr, ml_ptr, kn_ptr, vn_ptr, pos_ptr,
             sq_g, sq_d, sk_g, sk_t, sk_d, sv_g, sv_t, sv_d, smask_g, smask_t, skn_g, skn_d, svn_g, svn_d, scale,
             CHUNKS: tl.constexpr, BLOCK_T: tl.constexpr, D: tl.constexpr, REP: tl.constexpr,
             SCORE_DT: tl.constexpr, SCALE_MODE: tl.constexpr, HAS_MASK: tl.constexpr, QROWS: tl.constexpr,
             PER_PU: tl.constexpr, WRITE: tl.constexpr):
    # programs in runs of PER_PU (the blocked mapping of the cache's chunks onto PUs); a run that crosses a
    # head's end is rotated so its earliest positions come first: every PU's first program is its chunk most
    # likely left by the mask (a decode step's chunks past the position do nothing but end a PU's queue)
    lin = tl.program_id(1) * CHUNKS + tl.program_id(0)
    first = lin - lin % PER_PU
    run = tl.minimum(PER_PU, CHUNKS * tl.num_programs(1) - first)
    wrap = (CHUNKS - first % CHUNKS) % CHUNKS
    wrap = tl.where(wrap < run, wrap, 0)
    chunk = first + (lin - first + wrap) % run
    c = chunk % CHUNKS
    gkv = chunk // CHUNKS
    t = c * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.arange(0, D)
    row = c * 0 - 1  # the cache row this program writes (none: -1)
    kn = tl.zeros([D], k_ptr.dtype.element_ty)
    vn = tl.zeros([D], v_ptr.dtype.element_ty)
    if WRITE:  # the step's `cache[:, :, pos] = new` for K and V, by the program whose chunk holds pos
        pos = tl.load(pos_ptr).to(tl.int32)
        pos = tl.where(pos < 0, pos + CHUNKS * BLOCK_T, pos)
        tl.device_assert((pos >= 0) & (pos < CHUNKS * BLOCK_T), "index out of bounds: pos outside the KV cache")
        if pos // BLOCK_T == c:
            kn = tl.load(kn_ptr + gkv * skn_g + d * skn_d)
            vn = tl.load(vn_ptr + gkv * svn_g + d * svn_d)
            tl.store(k_ptr + gkv * sk_g + pos * sk_t + d * sk_d, kn)
            tl.store(v_ptr + gkv * sv_g + pos * sv_t + d * sv_d, vn)
            row = pos
    if REP == 1:  # one query row: vector products (the matrix unit would pad it to 16 rows)
        base = gkv * CHUNKS + c
        add = tl.zeros([BLOCK_T], tl.float32)
        if HAS_MASK:
            add = tl.load(mask_ptr + gkv * smask_g + t * smask_t).to(tl.float32)
        if tl.max(add, 0) > float("-inf"):  # a chunk the mask leaves some position of: K and V are read
            k = _with_row(tl.load(k_ptr + gkv * sk_g + t[:, None] * sk_t + d[None, :] * sk_d), t, row, kn,
                          WRITE).to(tl.float32)
            v = _with_row(tl.load(v_ptr + gkv * sv_g + t[:, None] * sv_t + d[None, :] * sv_d), t, row, vn,
                          WRITE).to(tl.float32)
            q = tl.load(q_ptr + gkv * sq_g + d * sq_d).to(tl.float32)
            s = _epilogue(tl.sum(k * q[None, :], 1), scale, SCORE_DT, SCALE_MODE) + add
            m = tl.max(s, 0)
            p = tl.exp(s - tl.where(m == float("-inf"), 0.0, m))
            tl.store(o_ptr + base * D + d, tl.sum(p[:, None] * v, 0))
            tl.store(ml_ptr + base * 2 + tl.arange(0, 2), tl.where(tl.arange(0, 2) == 0, m, tl.sum(p, 0)))
        else:  # every position masked off: no loads, the chunk's weight is exp(-inf) = 0 (o is not read)
            tl.store(ml_ptr + base * 2 + tl.arange(0, 2), tl.where(tl.arange(0, 2) == 0, float("-inf"), 0.0))
    else:  # the query rows of every head sharing this KV head, on the matrix unit (padded to 16 rows)
        r = tl.arange(0, QROWS)
        g = gkv * REP + r
        base = g * CHUNKS + c
        two = tl.arange(0, 2)
        add = tl.zeros([QROWS, BLOCK_T], tl.float32)
        if HAS_MASK:
            add = tl.load(mask_ptr + g[:, None] * smask_g + t[None, :] * smask_t, mask=r[:, None] < REP,
                          other=float("-inf")).to(tl.float32)
        if tl.max(tl.max(add, 1), 0) > float("-inf"):
            k = _with_row(tl.load(k_ptr + gkv * sk_g + t[:, None] * sk_t + d[None, :] * sk_d), t, row, kn, WRITE)
            v = _with_row(tl.load(v_ptr + gkv * sv_g + t[:, None] * sv_t + d[None, :] * sv_d), t, row, vn, WRITE)
            q = tl.load(q_ptr + g[:, None] * sq_g + d[None, :] * sq_d, mask=r[:, None] < REP, other=0.0)
            s = _epilogue(tl.dot(q.to(k.dtype), tl.trans(k), input_precision="ieee"), scale, SCORE_DT,
                          SCALE_MODE) + tl.where(r[:, None] < REP, add, 0.0)
            m = tl.max(s, 1)
            p = tl.exp(s - tl.where(m == float("-inf"), 0.0, m)[:, None])
            o = tl.dot(p.to(v.dtype), v, input_precision="ieee")
            tl.store(o_ptr + base[:, None] * D + d[None, :], o, mask=r[:, None] < REP)
            tl.store(ml_ptr + base[:, None] * 2 + two[None, :],
                     tl.where(two[None, :] == 0, m[:, None], tl.sum(p, 1)[:, None]), mask=r[:, None] < REP)
        else:
            tl.store(ml_ptr + base[:, None] * 2 + two[None, :],
                     tl.where(two[None, :] == 0, float("-inf"), 0.0) + tl.zeros([QROWS, 2], tl.float32),
                     mask=r[:, None] < REP)


@triton.jit
def _partial_runs(q_ptr, k_ptr, v_ptr, mask_ptr, o_ptr, ml_ptr, kn_ptr, vn_ptr, pos_ptr, mpos_ptr,
                  sq_g, sq_d, sk_g, sk_t, sk_d, sv_g, sv_t, sv_d, smask_g, smask_t, skn_g, skn_d, svn_g, svn_d, scale,
                  CHUNKS: tl.constexpr, BLOCK_T: tl.constexpr, D: tl.constexpr,
                  SCORE_DT: tl.constexpr, SCALE_MODE: tl.constexpr, HAS_MASK: tl.constexpr,
                  PER_PU: tl.constexpr, RUN: tl.constexpr, TOTAL: tl.constexpr, WRITE: tl.constexpr,
                  CAUSAL: tl.constexpr, SAME_POS: tl.constexpr, QKV: tl.constexpr, q_off, qkv_step):
    # one program per PU: the run of PER_PU chunks [first, first + run) of the cache (chunk `lin` is head
    # lin // CHUNKS, rows (lin % CHUNKS) * BLOCK_T...), at most two heads A and B (PER_PU <= CHUNKS)
    first = tl.program_id(0) * PER_PU
    run = tl.minimum(PER_PU, TOTAL - first)
    ga = first // CHUNKS
    gb = (first + run - 1) // CHUNKS
    d = tl.arange(0, D)
    jr = tl.arange(0, RUN)
    gj = (first + jr) // CHUNKS
    tj = ((first + jr) % CHUNKS)[:, None] * BLOCK_T + tl.arange(0, BLOCK_T)[None, :]
    if WRITE:
        pos = tl.load(pos_ptr)
    # his[j]: one past chunk j's last position the mask leaves; the loop's loads are bounded by it (data loaded
    # before the loop: the next rows stream in while this step computes), so past a decode step's position
    # nothing is moved
    if HAS_MASK:
        amask = tl.load(mask_ptr + gj[:, None] * smask_g + tj * smask_t, mask=(jr < run)[:, None],
                        other=float("-inf")).to(tl.float32)
        his = tl.max(tl.where(amask > float("-inf"), tj, -1), 1) + 1
    elif CAUSAL:  # the mask is `arange(T) <= mpos`: the bound is mpos + 1, no mask is read
        if SAME_POS:
            mp = pos
        else:
            mp = tl.load(mpos_ptr)
        mp = tl.minimum(tl.maximum(mp, -1), CHUNKS * BLOCK_T).to(tl.int32)
        his = tl.where(jr < run, tl.minimum(tl.max(tj, 1) + 1, mp + 1), 0)
    else:
        his = tl.where(jr < run, tl.max(tj, 1) + 1, 0)
    hia = tl.max(tl.where(gj == ga, his, 0), 0)
    hib = tl.max(tl.where(gj == gb, his, 0), 0)
    if WRITE:  # the step's `cache[:, :, pos] = new` for K and V of heads A and B, when the run holds pos's chunk
        pos = pos.to(tl.int32)
        pos = tl.where(pos < 0, pos + CHUNKS * BLOCK_T, pos)
        tl.device_assert((pos >= 0) & (pos < CHUNKS * BLOCK_T), "index out of bounds: pos outside the KV cache")
        la = ga * CHUNKS + pos // BLOCK_T
        lb = gb * CHUNKS + pos // BLOCK_T
        wa = (la >= first) & (la < first + run)
        wb = (gb != ga) & (lb >= first) & (lb < first + run)
    if QKV:  # q, k_new and v_new are rows of one buffer (a fused qkv projection): heads A and B's rows, one DMA
        pr = tl.arange(0, 4)
        hc = tl.arange(0, 2 * D)
        nrows = 1
        if WRITE:
            nrows = tl.where(wa | wb, 3, 1)
        x = tl.load(q_ptr + q_off + ga * D + pr[:, None] * qkv_step + hc[None, :],
                    mask=(pr < nrows)[:, None] & (hc < (gb - ga + 1) * D)[None, :], other=0.0).to(tl.float32)
        qa, qb = _halves(tl.sum(tl.where(pr[:, None] == 0, x, 0.0), 0), D)
        qb = tl.where(gb != ga, qb, qa)
    else:
        qa = tl.load(q_ptr + ga * sq_g + d * sq_d).to(tl.float32)
        qb = tl.load(q_ptr + gb * sq_g + d * sq_d).to(tl.float32)
        x, pr = 0.0, 0  # no fused rows: `_write_new_kv` loads the new rows
    if WRITE:
        if wa:
            _write_new_kv(ga, False, x, pr, pos, d, D, QKV, kn_ptr, skn_g, skn_d, vn_ptr, svn_g, svn_d,
                          k_ptr, sk_g, sk_t, sk_d, v_ptr, sv_g, sv_t, sv_d)
        if wb:
            _write_new_kv(gb, True, x, pr, pos, d, D, QKV, kn_ptr, skn_g, skn_d, vn_ptr, svn_g, svn_d,
                          k_ptr, sk_g, sk_t, sk_d, v_ptr, sv_g, sv_t, sv_d)
    m_t = tl.full([RUN], float("-inf"), tl.float32)
    den_t = tl.zeros([RUN], tl.float32)
    acc_t = tl.zeros([RUN, D], tl.float32)
    for j in range(PER_PU):  # one chunk per step: K and V rows below its bound, one DMA each
        lin = first + j
        gkv = lin // CHUNKS
        t0 = lin % CHUNKS * BLOCK_T
        lim = tl.where(j < run, tl.where(gkv == ga, hia, hib), 0)
        ts = t0 + tl.arange(0, BLOCK_T)
        live = ts < lim
        k = tl.load(k_ptr + gkv * sk_g + ts[:, None] * sk_t + d[None, :] * sk_d, mask=live[:, None], other=0.0)
        v = tl.load(v_ptr + gkv * sv_g + ts[:, None] * sv_t + d[None, :] * sv_d, mask=live[:, None], other=0.0)
        if t0 < lim:  # a chunk the mask leaves some row of (the written row is read back from the cache)
            sel = jr == j
            q = tl.where(gkv == ga, qa, qb)
            s = _epilogue(tl.sum(k.to(tl.float32) * q[None, :], 1), scale, SCORE_DT, SCALE_MODE).to(tl.float32)
            if HAS_MASK:
                s += tl.sum(tl.where(sel[:, None], amask, 0.0), 0)
            if CAUSAL:  # rows past mpos: -inf, as the mask adds (rows below lim are exactly those up to mpos)
                s = tl.where(live, s, float("-inf"))
            m = tl.max(s, 0)
            p = tl.exp(s - tl.where(m == float("-inf"), 0.0, m))
            den_t = tl.where(sel, tl.sum(p, 0), den_t)
            acc_t = tl.where(sel[:, None], tl.sum(p[:, None] * v.to(tl.float32), 0)[None, :], acc_t)
            m_t = tl.where(sel, m, m_t)
    # chunk lin's partial is row lin of o and ml (one query row per KV head: lin = head * CHUNKS + chunk)
    tl.store(o_ptr + (first + jr)[:, None] * D + d[None, :], acc_t, mask=(jr < run)[:, None])
    two = tl.arange(0, 2)
    tl.store(ml_ptr + (first + jr)[:, None] * 2 + two[None, :],
             tl.where(two[None, :] == 0, m_t[:, None], den_t[:, None]), mask=(jr < run)[:, None])


@triton.jit
def _write_new_kv(g, SECOND: tl.constexpr, x, pr, pos, d, D: tl.constexpr, QKV: tl.constexpr,
                  kn_ptr, skn_g, skn_d, vn_ptr, svn_g, svn_d, k_ptr, sk_g, sk_t, sk_d, v_ptr, sv_g, sv_t, sv_d):
    """`cache[g, pos] = new` for K and V of head g: with QKV its new rows are rows 1 and 2 of the fused q/k/v rows
    `x` (the second half for the run's second head), else they are loaded."""
    if QKV:
        ka, kb = _halves(tl.sum(tl.where(pr[:, None] == 1, x, 0.0), 0), D)
        va, vb = _halves(tl.sum(tl.where(pr[:, None] == 2, x, 0.0), 0), D)
        if SECOND:
            kn, vn = kb, vb
        else:
            kn, vn = ka, va
    else:
        kn = tl.load(kn_ptr + g * skn_g + d * skn_d)
        vn = tl.load(vn_ptr + g * svn_g + d * svn_d)
    tl.store(k_ptr + g * sk_g + pos * sk_t + d * sk_d, kn.to(k_ptr.dtype.element_ty))
    tl.store(v_ptr + g * sv_g + pos * sv_t + d * sv_d, vn.to(v_ptr.dtype.element_ty))


@triton.jit
def _halves(x, D: tl.constexpr):
    """The two halves of the [2 * D] row `x` (heads A and B of a fused row), [D] each."""
    x2 = tl.reshape(x, [2, D])
    h = tl.arange(0, 2)[:, None]
    return tl.sum(tl.where(h == 0, x2, 0.0), 0), tl.sum(tl.where(h == 1, x2, 0.0), 0)


@triton.jit
def _with_row(x, t, row, new, WRITE: tl.constexpr):
    """The chunk `x` ([BLOCK_T, D] rows `t`) with row `row` replaced by `new`: the row this program writes is
    used as written, without reading back its own store."""
    if WRITE:
        if row >= 0:  # only the writing program pays for the select
            x = tl.where(t[:, None] == row, new[None, :], x)
    return x


@triton.jit
def _epilogue(s, scale, SCORE_DT: tl.constexpr, SCALE_MODE: tl.constexpr):
    """The graph's score epilogue on the fp32 dot products `s`: rounded to the bmm's dtype and scaled (the mask
    is added by the caller)."""
    s = _round(s, SCORE_DT)
    if SCALE_MODE == 1:  # scaled in the bmm's dtype, then cast to fp32
        s = _round(s * scale, SCORE_DT)
    elif SCALE_MODE == 2:  # cast to fp32, then scaled
        s = s * scale
    return s


@triton.jit
def _combine(o_ptr, ml_ptr, out_ptr, so_g, so_d, CHUNKS: tl.constexpr, D: tl.constexpr, DS: tl.constexpr):
    # program (head, slice of DS output columns): the slices of a head spread over PUs, each reads the head's
    # chunk statistics and its columns of every chunk's row. (Reading only the chunks up to the last one with a
    # position left would make the footprint data-dependent, and automatic placement then replicates the output
    # for the next GEMV, whose storage Inductor reuses for a layer norm's output: 24 us more per step.)
    g = tl.program_id(0)
    c = tl.arange(0, CHUNKS)
    d = tl.program_id(1) * DS + tl.arange(0, DS)
    two = tl.arange(0, 2)
    ml = tl.load(ml_ptr + (g * CHUNKS + c[:, None]) * 2 + two[None, :])
    m = tl.max(tl.where(two[None, :] == 0, ml, float("-inf")), 1)
    w = tl.exp(m - tl.max(m, 0))
    den = tl.sum(w * tl.sum(tl.where(two[None, :] == 1, ml, 0.0), 1), 0)
    o = tl.load(o_ptr + (g * CHUNKS + c[:, None]) * D + d[None, :])
    o = tl.sum(tl.where(w[:, None] > 0, w[:, None] * o, 0.0), 0) / den  # a masked-off chunk's row is not written
    tl.store(out_ptr + g * so_g + d * so_d, o.to(out_ptr.dtype.element_ty))
