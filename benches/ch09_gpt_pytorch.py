"""The PyTorch reference for `cargo bench --bench ch09_gpt` (chapter 9, section "Speed").

Not part of the crate or its tests: a measuring script to run by hand, on the same machine and in
the same sitting as the Rust benchmark, so the two can be compared.

    python3 -m venv /tmp/torch-venv
    /tmp/torch-venv/bin/pip install torch numpy     # CPU is enough
    /tmp/torch-venv/bin/python benches/ch09_gpt_pytorch.py                # add --train-only to skip generation

`--fused` or `--foreach` selects that AdamW implementation (PyTorch's default on CPU is the
per-parameter loop); give PyTorch the fastest of the three on the machine at hand.

`--rounds N --ours BINARY` times the training step in N alternating rounds instead, the way the
appendix compares the two on a noisy machine: in each round ours on 1 thread, PyTorch on 1, ours
on 2, PyTorch on 2 (who goes first alternates from round to round). BINARY is the Rust benchmark
built by `cargo bench --bench ch09_gpt --no-run` (the path cargo prints); each of its runs is a
fresh `BINARY --child-train-step` process with `LLM_WORKBOOK_THREADS` set. Both sides take the
best of 3 × 10 steps after 2 warm-up steps. It prints every round, the medians, the ranges of the
ratios and how many rounds reach 1.3× (one thread) and 1.5× (two threads).
With `--strict` added, each round runs PyTorch with all three AdamW implementations and takes its
best, and the summary gives our median against each round's best and against the best of the
whole sitting, and in how many rounds the strict ratio reaches the goal (chapter 10, "The
comparison that survives the spread").
`--profile` (with `--fused` or `--foreach` if wanted) prints PyTorch's autograd profile of the
training step on one thread, grouped into the parts chapter 10's profile of ours names.
With `--generate` added, the rounds time cached generation instead (256 new tokens at batch 1 from
the 6-layer, width-384 model below, best of 3 on each side; ours is `BINARY
--child-generate-cached`), and count the rounds at 2× on each thread count.

It measures what the Rust benchmark measures, with the same shapes and the same model:

1. One training step of nanoGPT's CPU configuration (4 layers, 4 heads, width 128, context 64,
   batch 12, vocabulary 65, f32): forward, backward, clipping the global gradient norm at 1, one
   AdamW step (beta = (0.9, 0.95), weight decay 0.1 on the matrices and embeddings), on 1 and on 2
   threads. The model matches the crate's: pre-LN blocks with biases, GELU in its tanh form, tied
   embeddings, learned positions, eps = 1e-5 (the crate's GPT LayerNorm eps), no dropout.
   Attention uses `scaled_dot_product_attention` with the causal flag, as nanoGPT does.
2. Generation of 256 new tokens at batch 1 from a 6-layer, 6-head, width-384 model with a context
   of 256, sampling at temperature 1, with a key/value cache and without one (the whole window
   again for every token, as nanoGPT's `generate` does).
"""

import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width, eps=1e-5)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width, eps=1e-5)
        self.fc = nn.Linear(width, 4 * width)
        self.fc_proj = nn.Linear(4 * width, width)

    def attend(self, x, cache=None):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (m.view(shape).transpose(1, 2) for m in (q, k, v))
        if cache is not None:
            if cache:
                k = torch.cat([cache[0], k], dim=2)
                v = torch.cat([cache[1], v], dim=2)
            cache[:] = [k, v]
        # With a cache the one new query may see every cached key: no mask is needed.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None or t > 1)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x, cache=None):
        x = x + self.attend(x, cache)
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab, context, layers, heads, width):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width, eps=1e-5)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, start=0, caches=None):
        pos = torch.arange(start, start + idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for i, blk in enumerate(self.blocks):
            x = blk(x, None if caches is None else caches[i])
        return self.ln_f(x) @ self.wte.weight.t()


# PyTorch's three AdamW implementations on CPU, by the keyword that selects each.
ADAMW_VARIANTS = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def adamw_variant():
    """The AdamW implementation asked for on the command line: fused, foreach, or the default."""
    if "--fused" in sys.argv:
        return ADAMW_VARIANTS["fused"]
    if "--foreach" in sys.argv:
        return ADAMW_VARIANTS["foreach"]
    return ADAMW_VARIANTS["default"]


def training_step(threads, variant):
    """One training step of nanoGPT's CPU configuration (module docs, item 1) on `threads`
    threads with the AdamW implementation `variant`, as a function of no arguments."""
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    vocab, context, batch = 65, 64, 12
    model = Gpt(vocab, context, 4, 4, 128)
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
        **variant,
    )
    data = torch.randint(0, vocab, (50_000,))

    def step():
        ix = torch.randint(len(data) - context - 1, (batch,))
        x = torch.stack([data[i : i + context] for i in ix])
        y = torch.stack([data[i + 1 : i + 1 + context] for i in ix])
        loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def train_tokens_per_second(threads, steps=10, repeats=3, variant=None):
    step = training_step(threads, adamw_variant() if variant is None else variant)
    batch, context = 12, 64
    for _ in range(2):
        step()
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - t) / steps)
    return batch * context / best, best


@torch.no_grad()
def generate_tokens_per_second(threads, cache, new=256):
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    context = 256
    model = Gpt(65, context, 6, 6, 384).eval()
    g = torch.Generator().manual_seed(3)
    idx = torch.zeros((1, 1), dtype=torch.long)
    t = time.perf_counter()
    if cache:
        caches = [[] for _ in model.blocks]
        logits = model(idx, 0, caches)
        for n in range(new):
            nxt = torch.multinomial(F.softmax(logits[:, -1, :], dim=-1), 1, generator=g)
            idx = torch.cat([idx, nxt], dim=1)
            if n + 1 < new:
                logits = model(nxt, idx.shape[1] - 1, caches)
    else:
        for _ in range(new):
            window = idx[:, -context:]
            logits = model(window)
            nxt = torch.multinomial(F.softmax(logits[:, -1, :], dim=-1), 1, generator=g)
            idx = torch.cat([idx, nxt], dim=1)
    return new / (time.perf_counter() - t)


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def ours_tokens_per_second(binary, threads):
    """Tokens per second of the crate's fused step: one child process of the Rust benchmark."""
    env = dict(os.environ, LLM_WORKBOOK_THREADS=str(threads), LLM_WORKBOOK_BACKEND="ours")
    out = subprocess.run([binary, "--child-train-step"], env=env, capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.split():
        last = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}, no output"])[-1]
        sys.exit(f"error: --ours {binary}: its --child-train-step failed: {last}")
    return float(out.stdout.split()[0])


def ours_generation_tokens_per_second(binary, threads):
    """Cached tokens per second of the crate (best of 3): one child process of the Rust benchmark."""
    env = dict(os.environ, LLM_WORKBOOK_THREADS=str(threads), LLM_WORKBOOK_BACKEND="ours")
    out = subprocess.run([binary, "--child-generate-cached"], env=env, capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.split():
        last = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}, no output"])[-1]
        sys.exit(f"error: --ours {binary}: its --child-generate-cached failed: {last}")
    return float(out.stdout.split()[0])


def option(name):
    """The value after `name` on the command line, or None; exits with one line when it is missing."""
    if name not in sys.argv:
        return None
    i = sys.argv.index(name)
    if i + 1 >= len(sys.argv) or sys.argv[i + 1].startswith("--"):
        sys.exit(f"error: {name} needs a value")
    return sys.argv[i + 1]


def rounds(count, binary, generate):
    """The training step (or, `generate`, cached generation) of both, alternating, `count` rounds;
    see the module's documentation."""
    if not os.access(binary, os.X_OK):
        sys.exit(f"error: --ours {binary}: not an executable file (build it with `cargo bench --bench ch09_gpt --no-run`)")
    print(f"PyTorch {torch.__version__}; ours: {binary}")
    if generate:
        print(f"cached generation, 256 new tokens, 6 layers, width 384; load before {load()}")
        ours_side = ours_generation_tokens_per_second
        def theirs(threads):
            return max(generate_tokens_per_second(threads, True) for _ in range(3))
        goals = (2.0, 2.0)
    else:
        print(f"AdamW: {adamw_variant() or 'default (per-parameter loop)'}; load before {load()}")
        ours_side = ours_tokens_per_second
        def theirs(threads):
            return train_tokens_per_second(threads)[0]
        goals = (1.3, 1.5)
    print("| round | ours, 1 thread | PyTorch, 1 thread | ratio | ours, 2 threads | PyTorch, 2 threads | ratio | load |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for r in range(1, count + 1):
        row = []
        for threads in (1, 2):
            if r % 2:
                o = ours_side(binary, threads)
                p = theirs(threads)
            else:
                p = theirs(threads)
                o = ours_side(binary, threads)
            row += [o, p]
        rows.append(row)
        o1, p1, o2, p2 = row
        print(f"| {r} | {o1:,.1f} | {p1:,.1f} | {o1 / p1:.2f}× | {o2:,.1f} | {p2:,.1f} | {o2 / p2:.2f}× | {load()} |", flush=True)
    one = [o / p for o, p, _, _ in rows]
    two = [o / p for _, _, o, p in rows]
    med = [statistics.median(c) for c in zip(*rows)]
    print(f"| median | {med[0]:,.0f} | {med[1]:,.0f} | {statistics.median(one):.2f}× | {med[2]:,.0f} | {med[3]:,.0f} | {statistics.median(two):.2f}× | |")
    print(f"| range of the ratio | | | {min(one):.2f}–{max(one):.2f}× | | | {min(two):.2f}–{max(two):.2f}× | |")
    print(f"| rounds at the goal | | | {sum(x >= goals[0] for x in one)} of {count} at {goals[0]}× | | | {sum(x >= goals[1] for x in two)} of {count} at {goals[1]}× | |")


# PyTorch operators grouped into the parts of the step that chapter 10's profile of ours names.
PROFILE_PARTS = [
    ("products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm")),
    ("attention (SDPA: softmax and masking)", ("scaled_dot_product", "flash_attention", "aten::_softmax", "softmax_backward")),
    ("LayerNorm", ("layer_norm",)),
    ("GELU", ("gelu",)),
    ("AdamW and clipping", ("adam", "_foreach", "clip_grad", "aten::norm", "linalg_vector_norm", "aten::lerp", "aten::addcdiv", "aten::addcmul", "aten::sqrt", "aten::mul_", "aten::div_")),
    ("loss (log-softmax, NLL)", ("log_softmax", "nll_loss", "cross_entropy")),
    ("embeddings", ("embedding",)),
    ("copies and views' materialisation", ("aten::copy_", "aten::clone", "aten::contiguous", "aten::cat", "aten::stack", "aten::index", "aten::fill_", "aten::zero_", "aten::zeros", "aten::empty")),
]


def profile_step(variant_name, steps=20):
    """PyTorch's own profile of the training step on one thread: self CPU time per operator,
    grouped into the parts of PROFILE_PARTS (the first part whose pattern an operator's name
    contains), in ms per step and as shares of the profiled total."""
    from torch.profiler import ProfilerActivity, profile

    step = training_step(1, ADAMW_VARIANTS[variant_name])
    for _ in range(3):
        step()
    wall = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    wall = (time.perf_counter() - wall) / steps
    parts = {name: 0.0 for name, _ in PROFILE_PARTS}
    parts["other"] = 0.0
    for e in prof.key_averages():
        name = e.key.lower()
        part = next((n for n, pats in PROFILE_PARTS if any(p.lower() in name for p in pats)), "other")
        parts[part] += e.self_cpu_time_total / 1e3 / steps
    total = sum(parts.values())
    print(f"PyTorch {torch.__version__}, AdamW {variant_name}, 1 thread, {steps} profiled steps; load {load()}")
    print(f"wall time per step under the profiler {wall * 1e3:.1f} ms; profiled self time {total:.1f} ms")
    print("| part | ms per step | share |")
    print("|---|---|---|")
    for name, ms in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {ms:.2f} | {100 * ms / total:.1f} % |")
    top = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:15]
    print()
    print("| operator | ms per step |")
    print("|---|---|")
    for e in top:
        print(f"| {e.key} | {e.self_cpu_time_total / 1e3 / steps:.2f} |")


def strict_rounds(count, binary):
    """The training step by the strict rule, `count` alternating rounds: in each round ours, then
    PyTorch with each of its three AdamW implementations (SDPA attention in all), on 1 and on 2
    threads, who goes first alternating. PyTorch's value of a round is its best implementation in
    that round. Printed: every round; our median against each round's PyTorch best (the strict
    ratio, and in how many rounds it reaches the goal); our median against the best PyTorch run of
    the whole sitting (the strictest single number); and the plain median ratio for comparison."""
    if not os.access(binary, os.X_OK):
        sys.exit(f"error: --ours {binary}: not an executable file (build it with `cargo bench --bench ch09_gpt --no-run`)")
    print(f"PyTorch {torch.__version__}; ours: {binary}; load before {load()}")
    print("strict rule: our median ÷ PyTorch's best of default, foreach and fused AdamW in each round")
    goals = {1: 1.3, 2: 1.5}
    names = list(ADAMW_VARIANTS)
    head = " | ".join(f"PyTorch {n}" for n in names)
    print(f"| round | threads | ours | {head} | PyTorch best | load |")
    print("|---|---|---|" + "---|" * len(names) + "---|---|")
    ours = {1: [], 2: []}
    best = {1: [], 2: []}
    for r in range(1, count + 1):
        for threads in (1, 2):
            def pytorch():
                return {n: train_tokens_per_second(threads, variant=ADAMW_VARIANTS[n])[0] for n in names}
            if r % 2:
                o = ours_tokens_per_second(binary, threads)
                p = pytorch()
            else:
                p = pytorch()
                o = ours_tokens_per_second(binary, threads)
            ours[threads].append(o)
            best[threads].append(max(p.values()))
            cells = " | ".join(f"{p[n]:,.1f}" for n in names)
            print(f"| {r} | {threads} | {o:,.1f} | {cells} | {max(p.values()):,.1f} | {load()} |", flush=True)
    print()
    print("| threads | ours, median | PyTorch best, median | median ratio | strict: ours median ÷ each round's best | rounds at the goal | ours median ÷ the sitting's best |")
    print("|---|---|---|---|---|---|---|")
    for threads in (1, 2):
        om = statistics.median(ours[threads])
        strict = [om / b for b in best[threads]]
        plain = statistics.median(o / b for o, b in zip(ours[threads], best[threads]))
        at_goal = sum(x >= goals[threads] for x in strict)
        print(
            f"| {threads} | {om:,.0f} | {statistics.median(best[threads]):,.0f} | {plain:.2f}× | "
            f"{min(strict):.2f}–{max(strict):.2f}× (median {statistics.median(strict):.2f}×) | "
            f"{at_goal} of {count} at {goals[threads]}× | {om / max(best[threads]):.2f}× |"
        )


def main():
    if "--profile" in sys.argv:
        profile_step("fused" if "--fused" in sys.argv else "foreach" if "--foreach" in sys.argv else "default")
        return
    count, binary = option("--rounds"), option("--ours")
    if (count is None) != (binary is None):
        sys.exit("error: --rounds and --ours go together: --rounds N --ours BINARY")
    if count is not None:
        if not count.isdigit() or int(count) == 0:
            sys.exit(f"error: --rounds {count}: expected a whole number of rounds, at least 1")
        if "--strict" in sys.argv:
            if "--generate" in sys.argv:
                sys.exit("error: --strict times the training step; it does not go with --generate")
            strict_rounds(int(count), binary)
        else:
            rounds(int(count), binary, "--generate" in sys.argv)
        return
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown CPU")
    print(f"PyTorch {torch.__version__} on {cpu} ({os.cpu_count()} logical CPUs)")
    print()
    print(f"AdamW: {adamw_variant() or 'default (per-parameter loop)'}")
    print("gpt_train_step: 4 layers, 4 heads, width 128, context 64, batch 12, vocabulary 65, f32")
    print("| threads | tokens/s | ms/step | load (1, 5, 15 min) |")
    print("|---|---|---|---|")
    for threads in (1, 2):
        tps, step = train_tokens_per_second(threads)
        print(f"| {threads} | {tps:.0f} | {step * 1e3:.1f} | {load()} |")
    if "--train-only" in sys.argv:
        return
    print()
    print("gpt_generate: 256 new tokens at batch 1, 6 layers, 6 heads, width 384, context 256, f32")
    print("| threads | key/value cache | tokens/s | load (1, 5, 15 min) |")
    print("|---|---|---|---|")
    for threads in (1, 2):
        cached = max(generate_tokens_per_second(threads, True) for _ in range(3))
        print(f"| {threads} | yes | {cached:.1f} | {load()} |")
        print(f"| {threads} | no | {generate_tokens_per_second(threads, False):.1f} | {load()} |")


if __name__ == "__main__":
    main()
