"""Copies of the package with one phase of `chunk_kda_fwd_prep_kernel` left out, for timing the phases by difference
(their outputs are wrong; only the prep kernel's time is read):

    python data/bench/kda_prep_regs/ablations.py /tmp/abl && tar czf .devcache/ablations.tgz -C /tmp/abl .

noinv: no (kda.5) inversion (A stays L); nowu: no w, u, q̄, k̂ (`_wu` not called); nointra: neither branch of the
intra products (A, Aqk left unwritten; the inversion runs on whatever A holds)."""
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
KERNEL = "workbench/kda/forward_kernels.py"
EDITS = {
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
}


def main(out: Path):
    for name, edits in EDITS.items():
        tree = out / name
        shutil.rmtree(tree, ignore_errors=True)
        for part in ("workbench", "scripts"):
            shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
        path = tree / KERNEL
        text = path.read_text()
        for old, new in edits:
            if text.count(old) != 1:
                raise SystemExit(f"{name}: the text to replace is not in {KERNEL} once: {old[:60]!r}")
            text = text.replace(old, new)
        path.write_text(text)
        print(f"{tree}: {len(edits)} edit(s)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
