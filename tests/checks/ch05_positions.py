"""Independent check of chapter 5's snapshots with numpy.

Run `python3 tests/checks/ch05_positions.py`: it prints each matrix in the snapshot format
(`snapshots/ch05_positions__<name>.snap`, header line then one bracketed row per line) and
compares it with the file, so a snapshot is only accepted when numpy agrees digit for digit.
"""
import sys
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def fmt(m, dec):
    cells = [[f"{v:.{dec}f}" for v in row] for row in np.atleast_2d(m)]
    cells = [[c[1:] if c.startswith("-") and set(c[1:]) <= set("0.") else c for c in row] for row in cells]
    w = max(len(c) for row in cells for c in row)
    lines = [f"shape: {m.shape[0]}×{m.shape[1]}, decimals: {dec}"]
    lines += ["[" + ", ".join(c.rjust(w) for c in row) + "]" for row in cells]
    return "\n".join(lines)


def compare(stem, name, m, dec):
    path = ROOT / "snapshots" / f"{stem}__{name}.snap"
    for candidate in (path, path.with_suffix(".snap.new")):
        if candidate.exists():
            body = candidate.read_text().split("---\n", 2)[-1].strip()
            ok = body == fmt(m, dec)
            print(f"{'OK  ' if ok else 'DIFF'} {candidate.name}")
            if not ok:
                print(fmt(m, dec)); print(body)
            return ok
    print(f"MISSING {path.name}")
    return False


def pe(positions, exps):
    out = np.zeros((len(positions), len(exps)))
    for r, p in enumerate(positions):
        for j, e in enumerate(exps):
            a = p / 10000.0 ** e
            out[r, j] = np.sin(a) if j % 2 == 0 else np.cos(a)
    return out


def standard(n, d):
    return pe(range(n), [2 * (j // 2) / d for j in range(d)])


X = np.array([[0.1, 0.2, -0.1, 0.4], [-0.3, 0.5, 0.1, -0.2], [0.4, -0.3, 0.2, 0.1]])
Y = np.array([[0.0, 0.0, 0.0, 0.0], [-0.2, 0.4, 0.3, 0.1], [0.5, -0.1, -0.4, 0.3]])

if __name__ == "__main__":
    s = "ch05_positions"
    ok = all([
        compare(s, "pe_standard_3x4", standard(3, 4), 8),
        compare(s, "pe_column_index_3x4", pe(range(3), [2 * j / 4 for j in range(4)]), 8),
        compare(s, "x_plus_pe_standard", X + standard(3, 4), 8),
        compare(s, "y_plus_pe_standard", Y + standard(3, 4), 8),
        compare(s, "pe_standard_8x8", standard(8, 8), 8),
    ])
    sys.exit(0 if ok else 1)
