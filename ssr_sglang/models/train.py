"""Train the bundled tiny reasoning model on inventory-tally tasks (see ``tasks.py``).

    python -m ssr_sglang.models.train --out DIR --steps 1200 [--seed 0] [--threads 1]

Writes a transformers folder: ``config.json`` (Qwen3ForCausalLM, plus a top-level ``rope_theta`` for
SGLang), ``model.safetensors`` (bfloat16), a byte-level BPE tokenizer (``<think>``/``</think>``/chat
tokens are single special tokens, eos ``<|im_end|>``) and a chat template whose generation prompt
ends with ``<|im_start|>assistant\\n<think>\\n``.

About 30% of training sequences have their reasoning cut (at a line end, or at any token) and then
continue with the forced think end ``\\n</think>\\n\\n`` and the full answer, so that the model
answers right away when SSR forces the end of thinking in a draft.  Segments (prompt, reasoning,
think end, answer) are tokenized separately, exactly as a draft is built from generated tokens plus
the separately encoded think-end text.  ``--init DIR`` continues from a saved folder (same tokenizer).

``--arch qwen3_5`` trains a Qwen3.5 text hybrid instead (Gated DeltaNet layers, every
``--full-attention-interval``-th layer full attention), and ``--init-from-dense DIR`` starts it from a dense
folder's tokenizer and weights where they fit; the bundled ``tiny-hybrid-reasoner`` was made so (its
MODEL_CARD.md has the commands).
"""

from __future__ import annotations

from ssr_sglang.models.tokenizer_files import keep_think_tokens_in_text, train_chat_tokenizer

import argparse
import json
import math
import os
import random
import time
from pathlib import Path
from typing import List, Tuple

from .tasks import EOS, FORCE_ANSWER, format_chat, format_full, make_example, reasoning_lines

# Training draws tasks from random.Random(seed + TRAIN_SEED_OFFSET) (per DataLoader worker: + 7919*(id+1));
# evaluate.py uses random.Random(20240) and the tests random.Random(12345).
TRAIN_SEED_OFFSET = 1_000_003


def train_tokenizer(out_dir: Path, vocab_size: int = 512, seed: int = 0, n_texts: int = 3000):
    rng = random.Random(seed)
    return train_chat_tokenizer([format_full(make_example(rng)) for _ in range(n_texts)], out_dir, vocab_size)


class Encoder:
    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.force = self.enc(FORCE_ANSWER)
        self.eos = tokenizer.convert_tokens_to_ids(EOS)

    def enc(self, text: str) -> List[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def batch(self, exs, rng: random.Random, cut_frac: float) -> List[Tuple[List[int], int]]:
        """[(ids, n_prompt)]: prompt + reasoning (maybe cut) + think end + answer + eos, per example."""
        prompts = self.tok([format_chat(ex["prompt"]) for ex in exs], add_special_tokens=False)["input_ids"]
        reasonings = []
        for ex in exs:  # decide the cuts first (text-level line cuts need their own encoding)
            r = ex["reasoning"]
            mode = None
            if rng.random() < cut_frac:
                if rng.random() < 0.5:  # cut at a line end (k lines kept, k=0: no reasoning)
                    r = "\n".join(reasoning_lines(ex)[: rng.randrange(len(reasoning_lines(ex)))])
                else:  # cut at any token, as SSR forks at reasoning-token counts
                    mode = "token"
            reasonings.append((r, mode))
        r_ids = self.tok([r for r, _ in reasonings], add_special_tokens=False)["input_ids"]
        answers = self.tok([ex["answer"] for ex in exs], add_special_tokens=False)["input_ids"]
        out = []
        for p, r, (_, mode), a in zip(prompts, r_ids, reasonings, answers):
            if mode == "token":
                r = r[: rng.randrange(len(r))]
            out.append((p + r + self.force + a + [self.eos], len(p)))
        return out


import torch.utils.data


class _Batches(torch.utils.data.IterableDataset):
    """Endless stream of encoded batches (an IterableDataset for DataLoader workers, see ``--workers``)."""

    def __init__(self, tokenizer, seed: int, batch: int, cut_frac: float):
        super().__init__()
        self.tok, self.seed, self.batch, self.cut_frac = tokenizer, seed, batch, cut_frac

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        rng = random.Random(self.seed + TRAIN_SEED_OFFSET + 7919 * (info.id + 1 if info else 0))
        enc = Encoder(self.tok)
        while True:
            yield enc.batch([make_example(rng) for _ in range(self.batch)], rng, self.cut_frac)


QWEN3_5_FULL_ATTENTION_INTERVAL = 4  # Qwen3.5's default (and ssr_sglang.testing.tiny_models'): each fourth layer


def build_model(tokenizer, args):
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim,
        max_position_embeddings=args.max_pos,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if args.arch == "qwen3_5":
        # Qwen3.5 text hybrid: Gated DeltaNet (linear attention) layers, each fourth layer full attention
        # (gated output, partial RoPE 0.25 as Qwen3.5), the config ssr_sglang.testing.tiny_models builds.
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

        n, every = args.layers, args.full_attention_interval
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
        if "full_attention" not in types or "linear_attention" not in types:
            raise SystemExit(f"--arch qwen3_5: {n} layers with a full-attention layer every {every} is not a hybrid")
        config = Qwen3_5TextConfig(
            layer_types=types, linear_conv_kernel_dim=4, linear_key_head_dim=args.head_dim,
            linear_value_head_dim=args.head_dim, linear_num_key_heads=args.kv_heads,
            linear_num_value_heads=args.heads,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                             "partial_rotary_factor": args.partial_rotary_factor},
            partial_rotary_factor=args.partial_rotary_factor,  # else the top-level key says 0.25 (SGLang reads it)
            **common,
        )
        return Qwen3_5ForCausalLM(config)
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **common)
    return Qwen3ForCausalLM(config)


def init_from_dense(model, dense_dir: str) -> list:
    """Copy a dense Qwen3 model's weights into a Qwen3.5 hybrid where they fit; returns the names copied.

    Embeddings, every layer's MLP and norms, and each full-attention layer's k/v/o projections, q/k norms and
    the query half of its q projection (the other half, the output gate, is zero: sigmoid 0.5, so o_proj is
    copied times two). Qwen3.5's RMSNorms scale by ``1 + weight`` (Qwen3's by ``weight``), so norm weights are
    copied minus one. The Gated DeltaNet layers stay as initialised but for a zero output projection, so that
    the model starts as the dense one with those layers' attention removed (with ``--partial-rotary-factor 1``,
    exactly).
    """
    import torch
    from transformers import Qwen3ForCausalLM

    dense = Qwen3ForCausalLM.from_pretrained(dense_dir, dtype=torch.float32).state_dict()
    own = model.state_dict()
    copied = []

    def put(name, value):
        if name not in own or own[name].shape != value.shape:
            raise SystemExit(f"--init-from-dense: {name} does not fit ({tuple(value.shape)})")
        with torch.no_grad():
            own[name].copy_(value)
        copied.append(name)

    if dense["model.embed_tokens.weight"].shape != own["model.embed_tokens.weight"].shape:
        raise SystemExit("--init-from-dense: vocabulary or hidden size differs (use the dense model's tokenizer)")
    put("model.embed_tokens.weight", dense["model.embed_tokens.weight"])
    put("model.norm.weight", dense["model.norm.weight"] - 1)
    cfg = model.config
    for i, kind in enumerate(cfg.layer_types):
        src, dst = f"model.layers.{i}.", f"model.layers.{i}."
        if src + "mlp.gate_proj.weight" not in dense:
            continue
        for w in ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            put(dst + w + ".weight", dense[src + w + ".weight"])
        for w in ("input_layernorm", "post_attention_layernorm"):
            put(dst + w + ".weight", dense[src + w + ".weight"] - 1)
        if kind == "full_attention":
            hd, nh = cfg.head_dim, cfg.num_attention_heads
            q = dense[src + "self_attn.q_proj.weight"].view(nh, hd, -1)
            put(dst + "self_attn.q_proj.weight", torch.cat([q, torch.zeros_like(q)], 1).reshape(2 * nh * hd, -1))
            for w in ("k_proj", "v_proj"):
                put(dst + f"self_attn.{w}.weight", dense[src + f"self_attn.{w}.weight"])
            put(dst + "self_attn.o_proj.weight", 2 * dense[src + "self_attn.o_proj.weight"])
            for w in ("q_norm", "k_norm"):
                put(dst + f"self_attn.{w}.weight", dense[src + f"self_attn.{w}.weight"] - 1)
        else:
            with torch.no_grad():
                own[dst + "linear_attn.out_proj.weight"].zero_()
    return copied


def save(model, tokenizer, out: Path) -> None:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    m = model.to(torch.bfloat16)
    m.config.dtype = "bfloat16"
    m.save_pretrained(str(out), safe_serialization=True)
    model.to(torch.float32)
    tokenizer.save_pretrained(str(out))
    keep_think_tokens_in_text(out)
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    rope = cfg.get("rope_parameters") or {}
    cfg.setdefault("rope_theta", rope.get("rope_theta", 10000.0))
    if cfg.get("model_type") == "qwen3_5_text":  # SGLang's Qwen3.5 config reads the interval, not layer_types
        cfg["full_attention_interval"] = cfg["layer_types"].index("full_attention") + 1
        # transformers' rotary reads rope_parameters, SGLang's the top-level key: the same value in both
        if "partial_rotary_factor" in rope:
            cfg["partial_rotary_factor"] = rope["partial_rotary_factor"]
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    # transformers writes eos/pad/bos ids there; greedy decoding needs nothing from it.
    (out / "generation_config.json").unlink(missing_ok=True)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr-frac", type=float, default=0.05)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--cut-frac", type=float, default=0.3, help="fraction of sequences with cut reasoning")
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--intermediate", type=int, default=384)
    p.add_argument("--max-pos", type=int, default=1024)
    p.add_argument("--no-bf16", action="store_true", help="train without bf16 autocast")
    p.add_argument("--device", default="cpu")
    p.add_argument("--workers", type=int, default=0, help="DataLoader processes making batches (0: in-process)")
    p.add_argument("--init", default=None, help="continue from this saved folder (model + tokenizer)")
    p.add_argument("--arch", choices=("qwen3", "qwen3_5"), default="qwen3",
                   help="qwen3: dense (the bundled tiny-reasoner); qwen3_5: Qwen3.5 text hybrid, Gated DeltaNet "
                        "layers with each fourth layer full attention")
    p.add_argument("--full-attention-interval", type=int, default=QWEN3_5_FULL_ATTENTION_INTERVAL,
                   help="with --arch qwen3_5: every N-th layer is full attention, the others Gated DeltaNet")
    p.add_argument("--partial-rotary-factor", type=float, default=0.25,
                   help="with --arch qwen3_5: share of each head's dims RoPE rotates (Qwen3.5: 0.25; the dense "
                        "model: 1, so its attention copies over exactly)")
    p.add_argument("--init-from-dense", default=None, metavar="DIR",
                   help="with --arch qwen3_5: take the tokenizer from this dense Qwen3 folder and copy its weights "
                        "where shapes match (embeddings, MLPs, norms, the full-attention layers' attention)")
    p.add_argument("--save-every", type=int, default=200)
    p.add_argument("--log-every", type=int, default=20)
    args = p.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    if args.init:
        tokenizer = AutoTokenizer.from_pretrained(args.init)
        model = AutoModelForCausalLM.from_pretrained(args.init, dtype=torch.float32)
    elif args.init_from_dense:
        if args.arch != "qwen3_5":
            raise SystemExit("--init-from-dense is for --arch qwen3_5")
        tokenizer = AutoTokenizer.from_pretrained(args.init_from_dense)
        model = build_model(tokenizer, args)
        print(f"copied {len(init_from_dense(model, args.init_from_dense))} tensors from {args.init_from_dense}",
              flush=True)
    else:
        tokenizer = train_tokenizer(out, vocab_size=args.vocab, seed=args.seed)
        model = build_model(tokenizer, args)
    model.to(args.device).train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params} vocab {len(tokenizer)}", flush=True)

    pad = tokenizer.pad_token_id
    stream = _Batches(tokenizer, args.seed, args.batch, args.cut_frac)
    if args.workers:
        import torch.utils.data

        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import torch.multiprocessing

        batches = iter(torch.utils.data.DataLoader(
            stream, batch_size=None, num_workers=args.workers, collate_fn=lambda b: b, prefetch_factor=4,
            multiprocessing_context=torch.multiprocessing.get_context("fork"),
        ))
    else:
        batches = iter(stream)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )

    def lr_at(step: int) -> float:
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        t = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))

    t0 = time.time()
    ema = None
    for step in range(args.steps):
        seqs = next(batches)
        L = max(len(s) for s, _ in seqs)
        ids = torch.full((args.batch, L), pad, dtype=torch.long)
        labels = torch.full((args.batch, L), -100, dtype=torch.long)
        mask = torch.zeros((args.batch, L), dtype=torch.long)
        for i, (s, n_prompt) in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            labels[i, n_prompt : len(s)] = torch.tensor(s[n_prompt:])
            mask[i, : len(s)] = 1
        ids, labels, mask = ids.to(args.device), labels.to(args.device), mask.to(args.device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=not args.no_bf16):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if (step + 1) % args.log_every == 0 or step == 0:
            print(f"step {step + 1} loss {loss.item():.4f} ema {ema:.4f} lr {lr_at(step):.2e} "
                  f"elapsed {time.time() - t0:.0f}s", flush=True)
        if args.save_every and (step + 1) % args.save_every == 0 and step + 1 < args.steps:
            save(model, tokenizer, out)
    model.eval()
    save(model.cpu(), tokenizer, out)
    info = {"steps": args.steps, "seed": args.seed, "params": n_params, "train_seconds": round(time.time() - t0, 1),
            "threads": args.threads, "device": args.device, "init": args.init, "arch": args.arch,
            "init_from_dense": args.init_from_dense}
    print(json.dumps(info), flush=True)


if __name__ == "__main__":
    main()
