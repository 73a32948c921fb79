"""Chapter 12's Llama files read by Hugging Face `transformers` (chapter 12, section 7).

Not part of the crate or its tests (tests cannot download `torch` or `transformers`): a check to
run by hand. It trains a small decoder with `gpt train --arch llama`, loads the generation
folder it wrote with `LlamaForCausalLM.from_pretrained` unchanged, and compares:

1. the logits of every position of a prompt: ours from `gpt sample --logits-out`, theirs from
   one forward pass of `transformers`, as the largest |difference| over all positions and
   tokens, and the largest |logit| for scale;
2. the greedy continuation: ours from `gpt sample --greedy`, theirs from `generate` with
   `do_sample=False` on the same token ids.

    python3 -m venv /tmp/torch-venv
    /tmp/torch-venv/bin/pip install torch transformers safetensors   # CPU is enough
    cargo build --release
    /tmp/torch-venv/bin/python benches/ch12_llama_transformers.py --ours target/release/llm-workbook

`--checkpoint DIR` compares an existing `gpt train --arch llama` folder instead of training one
(`--prompt`, `--tokens` choose the prompt and the continuation's length). The shape trained is
`--layers 2 --heads 4 --kv-heads 2 --width 64 --context 64` for `--steps` steps (default 200) on
chapter 8's default corpus, untied, so that `lm_head.weight` is read too.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import LlamaForCausalLM

POINTER_FILE = "CURRENT"


def generation_folder(checkpoint):
    """The folder `from_pretrained` reads: the generation the pointer names, or the folder."""
    pointer = os.path.join(checkpoint, POINTER_FILE)
    if os.path.exists(pointer):
        with open(pointer) as f:
            return os.path.join(checkpoint, f.read().strip())
    return checkpoint


def ours(binary, checkpoint, prompt, tokens, out):
    """Our greedy continuation (text) and the logits file `gpt sample --logits-out` writes."""
    args = [binary, "gpt", "sample", "--checkpoint", checkpoint, "--prompt", prompt]
    args += ["--tokens", str(tokens), "--greedy", "--logits-out", out]
    text = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    with open(out) as f:
        return text, json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ours", required=True, help="the llm-workbook binary")
    p.add_argument("--checkpoint", help="a gpt train --arch llama folder (default: train one)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--prompt", default="The quick brown fox")
    p.add_argument("--tokens", type=int, default=40)
    a = p.parse_args()
    torch.set_grad_enabled(False)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = a.checkpoint
        if checkpoint is None:
            checkpoint = os.path.join(tmp, "llama")
            shape = ["--layers", "2", "--heads", "4", "--kv-heads", "2", "--width", "64"]
            args = [a.ours, "gpt", "train", "--arch", "llama", "--untied", "--out", checkpoint]
            args += shape + ["--context", "64", "--steps", str(a.steps), "--batch", "8"]
            subprocess.run(args, check=True, capture_output=True)
        text, mine = ours(a.ours, checkpoint, a.prompt, a.tokens, os.path.join(tmp, "z.json"))
        folder = generation_folder(checkpoint)
        model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        ids = torch.tensor([mine["prompt"]])
        theirs = model(ids).logits[0]
        z = torch.tensor(mine["logits"], dtype=torch.float32)
        delta = (theirs - z).abs().max().item()
        scale = z.abs().max().item()
        out = model.generate(
            ids,
            max_new_tokens=a.tokens,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )[0, ids.shape[1]:].tolist()
        same = out == mine["new_tokens"]
        first_diff = next((i for i, (x, y) in enumerate(zip(out, mine["new_tokens"])) if x != y), None)
        cfg = json.load(open(os.path.join(folder, "config.json")))
        print(f"folder: {folder}")
        print(
            f"model: {cfg['num_hidden_layers']} layers, {cfg['num_attention_heads']} heads "
            f"({cfg['num_key_value_heads']} key/value), width {cfg['hidden_size']}, "
            f"MLP {cfg['intermediate_size']}, vocabulary {cfg['vocab_size']}, "
            f"tied {cfg['tie_word_embeddings']}"
        )
        print(f"prompt: {len(mine['prompt'])} tokens; ours: {text.strip()!r}")
        print(f"logits: max |ours - transformers| = {delta:.3e} (max |logit| {scale:.3f})")
        print(
            f"greedy: {len(out)} new tokens, "
            + ("the same" if same else f"differ from token {first_diff}")
        )
        return 0 if same and delta < 1e-3 * max(1.0, scale) else 1


if __name__ == "__main__":
    sys.exit(main())
