"""An independent GPT-2 forward pass in numpy, reading a checkpoint our crate wrote.

Reads config.json and model.safetensors (with the reference `safetensors` package), runs GPT-2's
forward pass as Hugging Face's modeling code defines it (learned positions, pre-LN blocks, fused
c_attn of shape d×3d applied as x @ W + b, GELU "gelu_new", final LayerNorm, logits = h @ wteᵀ or
lm_head), and compares the logits with the ones our code printed to logits.txt.

Usage: python3 tests/checks/ch09_gpt2_forward.py DIR   (needs numpy and safetensors; not a dependency)
"""
import json, sys
import numpy as np
from safetensors.numpy import load_file

d = sys.argv[1]
cfg = json.load(open(f"{d}/config.json"))
w = load_file(f"{d}/model.safetensors")
ids = [int(t) for t in open(f"{d}/ids.txt").read().split()]
n, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]

def ln(x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b

def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

T = len(ids)
x = w["wte.weight"][ids] + w["wpe.weight"][:T]
for l in range(cfg["n_layer"]):
    p = lambda s: w[f"h.{l}.{s}"]
    a = ln(x, p("ln_1.weight"), p("ln_1.bias"))
    qkv = a @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
    q, k, v = np.split(qkv, 3, axis=-1)
    hd = n // H
    heads = []
    for h in range(H):
        s = q[:, h * hd:(h + 1) * hd] @ k[:, h * hd:(h + 1) * hd].T / np.sqrt(hd)
        s = np.where(np.tril(np.ones((T, T))) == 1, s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        heads.append(s @ v[:, h * hd:(h + 1) * hd])
    x = x + np.concatenate(heads, -1) @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
    m = ln(x, p("ln_2.weight"), p("ln_2.bias"))
    x = x + gelu(m @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias")) @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
h = ln(x, w["ln_f.weight"], w["ln_f.bias"])
head = w["lm_head.weight"] if "lm_head.weight" in w else w["wte.weight"]
logits = h @ head.T
ours = np.array([[float(v) for v in line.split()] for line in open(f"{d}/logits.txt") if line.strip()])
print("tied" if "lm_head.weight" not in w else "untied", "max |numpy - ours| =", np.abs(logits - ours).max(), "largest logit", np.abs(logits).max())
