"""Prototype forward kernels for the warp-specialization probe (issue 47): q, k, v, o as [B*H*T, D] rows
(head-major), lse [B*H*T]; descriptors made on the device."""
import triton
import triton.language as tl


@triton.jit
def _tile(acc, m_i, l_i, b_q, k_desc, v_desc, row, j0, o_m, qk_scale, BN: tl.constexpr, MASK: tl.constexpr):
    b_k = k_desc.load([row + j0, 0])
    s = tl.dot(b_q, b_k.T) * qk_scale
    if MASK:
        o_n = j0 + tl.arange(0, BN)
        s = tl.where(o_m[:, None] >= o_n[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    b_v = v_desc.load([row + j0, 0])
    acc = tl.dot(p.to(b_v.dtype), b_v, acc)
    return acc, m_new, l_i


@triton.jit
def attn_fwd(q, k, v, T, NROWS, scale, o, lse, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
             CAUSAL: tl.constexpr, WS: tl.constexpr, ONE_LOOP: tl.constexpr):
    q_desc = tl.make_tensor_descriptor(q, [NROWS, D], [D, 1], [BM, D])
    k_desc = tl.make_tensor_descriptor(k, [NROWS, D], [D, 1], [BN, D])
    v_desc = tl.make_tensor_descriptor(v, [NROWS, D], [D, 1], [BN, D])
    o_desc = tl.make_tensor_descriptor(o, [NROWS, D], [D, 1], [BM, D])
    i_m = tl.num_programs(0) - 1 - tl.program_id(0)
    row = tl.program_id(1) * T
    m0 = i_m * BM
    o_m = m0 + tl.arange(0, BM)
    b_q = q_desc.load([row + m0, 0])
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    qk_scale = scale * 1.4426950408889634
    if ONE_LOOP:
        hi = T
        if CAUSAL:
            hi = m0 + BM
        for j0 in tl.range(0, hi, BN, warp_specialize=WS):
            acc, m_i, l_i = _tile(acc, m_i, l_i, b_q, k_desc, v_desc, row, j0, o_m, qk_scale, BN, CAUSAL)
    else:
        hi = T
        if CAUSAL:
            hi = m0
        for j0 in tl.range(0, hi, BN, warp_specialize=WS):
            acc, m_i, l_i = _tile(acc, m_i, l_i, b_q, k_desc, v_desc, row, j0, o_m, qk_scale, BN, False)
        if CAUSAL:
            for j0 in tl.range(m0, m0 + BM, BN):
                acc, m_i, l_i = _tile(acc, m_i, l_i, b_q, k_desc, v_desc, row, j0, o_m, qk_scale, BN, True)
    acc = acc / l_i[:, None]
    o_desc.store([row + m0, 0], acc.to(o_desc.dtype))
    tl.store(lse + row + o_m, m_i + tl.math.log2(l_i))
