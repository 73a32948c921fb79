"""Independent check of chapter 6's snapshots with numpy.

Run `python3 tests/checks/ch06_attention.py`: every matrix of document 003's walk-through (and of the
standard chain and the two-head example) is rebuilt here from the document's printed inputs and
compared with `snapshots/ch06_attention__<name>.snap` (or the pending `.snap.new`).
"""
import sys
import numpy as np
from ch05_positions import compare, pe, standard, X

S = "ch06_attention"


def P(text):
    return np.array([[float(v) for v in row.split()] for row in text.split(";")])


XPE = P("0.1 1.2 -0.1 1.4; 0.5415 1.49995 0.1001 0.8; 1.3093 0.6998 0.2002 1.1")
WQ = P("1 0 0 1; 0 1 1 0; 0 1 0 1; 1 0 1 0")
WK = P("0 1 1 0; 1 0 0 1; 1 0 1 0; 0 1 0 1")
WV = P("1 1 0 0; 0 0 1 1; 0 1 1 0; 1 0 0 1")
HEAD2 = P("1.5 0.8 1.2 2.0; 1.6 0.9 1.1 2.1; 1.4 0.7 1.3 1.9")
WO = P("0.37738326 0.83274845 0.37280978 0.14584743; 0.28706851 0.29072609 0.69116998 0.20106682;"
       "0.26764653 0.12058646 0.82634382 0.60818759; 0.44329703 0.4425581 0.89811744 0.24551412;"
       "0.9186323 0.40029736 0.17636762 0.06896409; 0.41921272 0.0495383 0.77792527 0.4354529;"
       "0.14791365 0.66822966 0.48313699 0.94127396; 0.11604641 0.51794357 0.62942357 0.76420883")
A1 = P("2.11372594 1.21488963 1.06582258 1.96465889; 2.10729705 1.1957622 1.06288922 1.97442407;"
       "1.82115196 0.90157546 1.21880742 2.13838393")
M = P("4.42554033 5.589241 6.99844643 4.79288192; 4.55176485 5.6122494 7.09923364 4.82144704;"
      "4.21254506 5.31988824 6.84520426 4.79017392")
LN1 = P("-1.03927142 0.13949668 1.56694829 -0.66717355; -0.97825977 0.09190721 1.59246789 -0.70611533;"
        "-1.10306273 0.02854757 1.58729045 -0.51277529")
FFN = P("1.70355949 4.58680433 7.47004916 10.353294; 1.56070622 4.19905974 6.83741326 9.47576678;"
        "2.19865128 5.93062489 9.66259851 13.39457212")
W1 = P("0.1 0.2 0.3 0.4 0.5 0.6; 0.7 0.8 0.9 1.0 1.1 1.2; 1.3 1.4 1.5 1.6 1.7 1.8; 1.9 2.0 2.1 2.2 2.3 2.4")
B1 = P("0.01 0.02 0.03 0.04 0.05 0.06")
W2 = P("0.1 0.7 1.3 1.9; 0.2 0.8 1.4 2.0; 0.3 0.9 1.5 2.1; 0.4 1.0 1.6 2.2; 0.5 1.1 1.7 2.3; 0.6 1.2 1.8 2.4")
B2 = P("0.01 0.02 0.03 0.04")


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def attend(q, k, v, causal=False):
    s = q @ k.T / np.sqrt(q.shape[1])
    if causal:
        s = s + np.triu(np.full(s.shape, -np.inf), 1)
    a = softmax(s)
    return s, a, a @ v


def ln_sqrt(x, eps=1e-6):
    mu = x.mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(axis=1, keepdims=True) + eps)


def ln_std(x, eps=1e-6):
    mu = x.mean(axis=1, keepdims=True)
    return (x - mu) / (x.std(axis=1, keepdims=True) + eps)


def ffn(x):
    return np.maximum(0, x @ W1 + B1) @ W2 + B2


def shift(k, d):
    s = np.zeros((d, d))
    for i in range(d // 2):
        w = 10000.0 ** (-2 * i / d)
        c, sn = np.cos(k * w), np.sin(k * w)
        s[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, -sn], [sn, c]]
    return s


if __name__ == "__main__":
    q, k, v = XPE @ WQ, XPE @ WK, XPE @ WV
    scores, weights, out = attend(q, k, v)
    _, wc, oc = attend(q, k, v, causal=True)
    concat = np.hstack([A1, HEAD2])
    xs = X + standard(3, 4)
    _, sw, so = attend(xs @ WQ, xs @ WK, xs @ WV)
    smh = np.hstack([so, HEAD2]) @ WO
    h = ln_sqrt(xs + smh)
    sout = ln_sqrt(h + ffn(h))
    # Two-head example: input PE of width 16 at 6 positions, causal.
    x16 = standard(6, 16)
    back = shift(-1.0, 16)
    eye = np.eye(16)
    h0 = attend(x16 @ (8 * back[:, :8]), x16 @ eye[:, :8], x16, causal=True)[1]
    h1 = attend(x16 @ (8 * eye[:, :8]), x16 @ eye[:, :8], x16, causal=True)[1]
    checks = [
        ("scores", scores, 8), ("weights", weights, 8), ("attention", out, 8),
        ("weights_causal", wc, 8), ("attention_causal", oc, 8),
        ("multihead", concat @ WO, 8), ("ln1_std_plus_eps", ln_std(M), 8), ("ln1_stated_formula", ln_sqrt(M), 8),
        ("ffn", ffn(LN1), 8), ("ln2", ln_sqrt(FFN), 8),
        ("standard_weights", sw, 8), ("standard_attention", so, 8), ("standard_multihead", smh, 8),
        ("standard_h", h, 8), ("standard_out", sout, 8),
        ("head0_previous_token", h0, 6), ("head1_same_token", h1, 6),
    ]
    ok = all([compare(S, name, m, d) for name, m, d in checks])
    sys.exit(0 if ok else 1)
