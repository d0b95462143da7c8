"""Copies of the package with one phase of a chunk_kda kernel left out, for timing the phases by difference (their
outputs are wrong; only that kernel's time is read):

    python data/bench/kda_prep_regs/ablations.py /tmp/abl [prep|bwd|intra] && tar czf .devcache/ablations.tgz -C /tmp/abl .

prep (`chunk_kda_fwd_prep_kernel`) — noinv: no (kda.5) inversion (A stays L); nowu: no w, u, q̄, k̂ (`_wu` not
called); nointra: neither branch of the intra products (A, Aqk left unwritten; the inversion runs on whatever A
holds). bwd (`chunk_kda_bwd_wy_dqkg_fused_kernel`) — no_dAqk: dAqk not formed; no_wyv: the WY backward's value
half (`_wy_values`, dv) left out; no_inter: the state products of each key block (`_inter_keys`: do hᵀ, δ dHᵀ,
dδ hᵀ over value blocks) replaced by tiles at hand; no_outputs: `_inter_outputs` (the state parts of dq, dk, dg
and dg's two cumulative sums) left out; no_dL: (kda.7) dL = −Aᵀ dA Aᵀ (`_store_dL`) left out. The stand-ins
are tiles the program holds anyway, so that no product's operand becomes a constant the compiler could fold.
intra (`chunk_kda_bwd_intra_kernel`, its whole-chunk path (kda.17), which the bench's gates take: spans of b in a
chunk ≤ ~50 against WHOLE_RANGE 60) — no_in: the fused kernel's dq, dk, dg (float32) not read back; no_mats: dAqk
and dL not loaded (tiles formed in registers); no_products: the four whole-chunk products replaced by elementwise
stand-ins; no_exps: exp(±(b − b_mid)) not taken."""
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FILES = {"prep": "workbench/kda/forward_kernels.py", "bwd": "workbench/kda/backward_kernels.py",
         "intra": "workbench/kda/backward_kernels.py"}
EDITS = {"prep": {
    "noinv": [("    for i_sub in range(0, BT // BC):\n        rows_i = start + i_sub * BC + o_c\n        m_i = rows_i < end\n"
               "        p_i = A +",
               "    for i_sub in range(0, 0):\n        rows_i = start + i_sub * BC + o_c\n        m_i = rows_i < end\n"
               "        p_i = A +")],
    "nowu": [("    _intra(q, k, b, beta, A, Aqk, start, end, i_h, scale, H, K, BT, BK, BKC, F32_DOT, WHOLE_SPAN, INV_DOT)\n"
              "    _wu(q, k, v, b, beta, A, w, u, qbar, khat, start, end, i_h, scale, H, K, V, BT, BV, F32_DOT)",
              "    _intra(q, k, b, beta, A, Aqk, start, end, i_h, scale, H, K, BT, BK, BKC, F32_DOT, WHOLE_SPAN, INV_DOT)")],
    "nointra": [("    if span <= WHOLE_SPAN:", "    if span < -1.0:"),
                ("    else:\n        for i_sub in range(0, BT // BC):  # a device loop",
                 "    elif span < -2.0:\n        for i_sub in range(0, BT // BC):  # a device loop")],
}, "bwd": {
    "no_dAqk": [("    tl.store(dAqk + p_mat, _dAqk(do, delta, rows, m_t, i_h, H, V, BT, BV, F32_DOT), mask=m_t[:, None])\n",
                 "")],
    "no_wyv": [("    b_dA, b_dbeta = _wy_values(v, ddelta, dv, b_A, b_beta, rows, m_t, i_h, H, V, BT, BV, F32_DOT, TRANS_A)",
                "    b_dA, b_dbeta = b_A.to(tl.float32), b_beta")],
    "no_inter": [("        b_bL = load_row(b, end - 1, i_h, o_k, m_k, H, K)\n"
                  "        b_dqbar, b_dkhat, b_dw, b_hdh = _inter_keys(delta, ddelta, do, hs, dhs, i_s, rows, m_t, i_h, o_k, m_k,\n"
                  "                                                    H, K, V, BT, BK, BV, F32_DOT)",
                  "        b_bL = load_row(b, end - 1, i_h, o_k, m_k, H, K)\n"
                  "        b_dqbar, b_dkhat, b_dw, b_hdh = b_k, b_b, b_k * b_b, b_bL")],
    "no_outputs": [("        b_dq, b_dk, b_dg = _inter_outputs(load_tile(q, rows, m_t, i_h, o_k, m_k, H, K), b_k, b_b, b_bL, rows, end,\n"
                    "                                          b_dqbar, b_dkhat, b_hdh, dg, p_k, m_tk, scale, H, K, BT)",
                    "        b_dq, b_dk, b_dg = b_dqbar, b_dkhat, b_dqbar + b_hdh[None, :]")],
    "no_dL": [("    _store_dL(dL, A, b_dA, start, end, i_h, H, BT, A_T_POINTER, TRANS_A)\n",
               "    tl.store(dL + p_mat, b_dA, mask=m_t[:, None])\n")],
}, "intra": {
    "no_in": [("            b_dq = tl.load(dq_in + p_k, mask=m_tk, other=0.0) + b_dqs",
               "            b_dq = b_kdown + b_dqs"),
              ("            b_dk = (tl.load(dk_in + p_k, mask=m_tk, other=0.0) + b_dks",
               "            b_dk = (b_up + b_dks"),
              ("            b_dg = tl.load(dg_in + p_k, mask=m_tk, other=0.0) + tl.cumsum(",
               "            b_dg = b_down + tl.cumsum(")],
    "no_mats": [("            b_dAqk = tl.load(dAqk + p_mat, mask=m_mat, other=0.0)",
                 "            b_dAqk = tl.where(m_mat, (o_t[:, None] - o_t[None, :]).to(tl.float32) * scale, 0.0)"),
                ("            b_dL = tl.where(strict, tl.load(dL + p_mat, mask=m_mat, other=0.0), 0.0)",
                 "            b_dL = tl.where(strict, b_dAqk * b_beta[:, None], 0.0)")],
    "no_products": [("            b_dqs = b_up * tl.dot(b_dAqk, b_kdown, input_precision=F32_DOT) * scale\n"
                     "            b_Y = b_up * tl.dot(b_dL, b_kdown, input_precision=F32_DOT)\n"
                     "            b_dks = b_down * tl.dot(tl.trans(b_dAqk), b_q * b_up, input_precision=F32_DOT) * scale\n"
                     "            b_Z = b_down * tl.dot(tl.trans(b_dL), b_k * (b_beta[:, None] * b_up), input_precision=F32_DOT)",
                     "            b_dqs = b_up * b_kdown * scale\n"
                     "            b_Y = b_up * b_kdown * tl.sum(b_dL, axis=1)[:, None]\n"
                     "            b_dks = b_down * b_q * b_up * scale\n"
                     "            b_Z = b_down * b_k * (b_beta[:, None] * b_up)")],
    "no_exps": [("            b_up = exp_e(b_d)  # exp(b_r − b_mid)\n            b_down = exp_e(-b_d)  # exp(b_mid − b_s)",
                 "            b_up = b_d + 1.0\n            b_down = 1.0 - b_d")],
}}


def main(out: Path, which: str = "prep"):
    for name, edits in EDITS[which].items():
        tree = out / name
        shutil.rmtree(tree, ignore_errors=True)
        for part in ("workbench", "scripts"):
            shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
        path = tree / FILES[which]
        text = path.read_text()
        for old, new in edits:
            if text.count(old) != 1:
                raise SystemExit(f"{name}: the text to replace is not in {FILES[which]} once: {old[:60]!r}")
            text = text.replace(old, new)
        path.write_text(text)
        print(f"{tree}: {len(edits)} edit(s)")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:3])
