"""Train the model organism from scratch on oracle trajectories of the built-in environments.

    python -m qdrift.organism.train --out qdrift/organism/weights --steps 1400

Reproducible: one seed fixes the initialisation, the environments' training seeds and the batch
order; runs on the CPU (2 threads) in bf16 autocast. Horizons follow a curriculum: the longest
horizon sampled grows from 8 to `--max-horizon` over the first half of the steps, after which
batches draw horizons from 1 to the maximum, so contexts as long as the longest evaluated episode
are in the training distribution. Each batch holds about `--batch-tokens` tokens of episodes of one
horizon (five environments mixed), right-padded; the loss is on the generated call tokens only.
The learning rate warms up linearly, then follows a cosine to 10%.

Every `--eval-every` steps the log records teacher-forced call accuracy (all tokens of a call
right under argmax) on held-out seeds. The log (JSON lines) is written next to the weights.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from qdrift.envs.registry import TRAIN_SEEDS_BELOW, make_environment
from qdrift.organism.data import encode_episode, training_episode
from qdrift.organism.tokenizer import SPECIALS, build_tokenizer

# dict_sum needs addition of looked-up values, not copying: left out of the organism's training.
TRAINED = ("pointer_chase", "ledger", "graph_nav", "file_system")
RAMP = 0.5  # fraction of the steps over which the longest sampled horizon grows from 8 to the maximum


def model_config(tokenizer, max_positions: int = 8192):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=4, head_dim=32, max_position_embeddings=max_positions,
        rope_theta=10_000.0, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )


def sample_horizon(rng: random.Random, progress: float, max_horizon: int) -> int:
    top = max_horizon if progress >= RAMP else max(8, round(8 + (max_horizon - 8) * progress / RAMP))
    if rng.random() < 0.5:
        return max(1, min(top, round(math.exp(rng.uniform(0, math.log(top))))))
    return rng.randint(1, top)


def make_batch(tokenizer, rng: random.Random, horizon: int, batch_tokens: int, envs=TRAINED):
    seqs = []
    total = 0
    while True:
        name = rng.choice(envs)
        seq = training_episode(tokenizer, name, horizon, rng.randrange(TRAIN_SEEDS_BELOW))
        seqs.append(seq)
        total = max(len(s.ids) for s in seqs) * len(seqs)
        if total >= batch_tokens or len(seqs) >= 64:
            break
    width = max(len(s.ids) for s in seqs)
    ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    tgt = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, : len(s.ids)] = torch.tensor(s.ids)
        tgt[i, : len(s.ids)] = torch.tensor(s.targets)
    return ids, tgt


def copy_batch(gen: torch.Generator, vocab: int, first: int, batch: int = 32, length: int = 20):
    """A random token string, a separator, and the same string again: the loss is on the repeat.

    Why: in the environments a value to copy is one target among ~20 fixed-format tokens, so the
    signal that forms a copying (induction) circuit is sparse, and from scratch the model sat on a
    plateau (it learned the call format, not the copy). This dense task forms the circuit in a few
    hundred steps; the environment trajectories then only have to point it at the right source.
    """
    x = torch.randint(first, vocab, (batch, length), generator=gen)
    ids = torch.cat([x, torch.full((batch, 1), first - 1), x], 1)
    tgt = torch.zeros_like(ids, dtype=torch.bool)
    tgt[:, length + 1:] = True
    return ids, tgt


def target_logits(model, ids: torch.Tensor, tgt: torch.Tensor):
    """Logits at the positions that predict a target token, and those tokens (right padding needs no mask)."""
    hidden = model.model(input_ids=ids).last_hidden_state
    select = tgt[:, 1:]
    return model.lm_head(hidden[:, :-1][select]), ids[:, 1:][select]


def train_step(model, opt, ids: torch.Tensor, tgt: torch.Tensor):
    """One AdamW step on the target tokens (bf16 autocast, gradient norm clipped to 1); (loss, labels)."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, labels = target_logits(model, ids, tgt)
        loss = F.cross_entropy(logits.float(), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss, labels


def call_accuracy(model, tokenizer, ids: torch.Tensor, tgt: torch.Tensor) -> tuple[int, int]:
    """(calls with every token right under argmax, calls) for one sequence, teacher-forced."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = model.model(input_ids=ids[None]).last_hidden_state[0]
        pred = model.lm_head(hidden[:-1]).argmax(-1)
    ok = pred == ids[1:]
    right = calls = 0
    current = True
    for t in range(1, len(ids)):
        if tgt[t]:
            current &= bool(ok[t - 1])
            if int(ids[t]) == tokenizer.eos_token_id:
                calls += 1
                right += current
                current = True
    return right, calls


def heldout_eval(model, tokenizer, envs=TRAINED, horizons=(16, 200), per=2) -> dict:
    model.eval()
    out = {}
    for name in envs:
        for L in horizons:
            right = calls = 0
            for i in range(per):
                seq = encode_episode(tokenizer, make_environment(name, horizon=L, seed=TRAIN_SEEDS_BELOW + 7919 * i,
                                                                 split="eval"))
                r, c = call_accuracy(model, tokenizer, torch.tensor(seq.ids), torch.tensor(seq.targets))
                right, calls = right + r, calls + c
            out[f"{name}@{L}"] = round(right / calls, 4)
    model.train()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=1400)
    ap.add_argument("--batch-tokens", type=int, default=12_000)
    ap.add_argument("--max-horizon", type=int, default=200)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--envs", nargs="+", default=list(TRAINED))
    ap.add_argument("--init", type=Path, default=None, help="continue from saved weights (skips the copy warmup)")
    ap.add_argument("--copy-warmup", type=int, default=300, help="steps of the dense copy task before the trajectories")
    args = ap.parse_args(argv)

    from transformers import LlamaForCausalLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(f"organism-train-{args.seed}")
    tokenizer = build_tokenizer()
    if args.init is not None:
        model = LlamaForCausalLM.from_pretrained(args.init, dtype=torch.float32, attn_implementation="sdpa")
        args.copy_warmup = 0
    else:
        model = LlamaForCausalLM._from_config(model_config(tokenizer), attn_implementation="sdpa")
    n_params = sum(p.numel() for p in model.parameters())
    # No weight decay on the (tied) embedding: copying a value is an identity map through it,
    # and decay pulls it towards the low-rank "nearby number" solution seen in early training.
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "embed" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / "train_log.jsonl"
    log = log_path.open("w")

    def emit(row):
        log.write(json.dumps(row) + "\n")
        log.flush()
        print(json.dumps(row), flush=True)

    emit({"event": "start", "params": n_params, "vocab": len(tokenizer), **{k: str(v) for k, v in vars(args).items()},
          "torch": torch.__version__})
    t0 = time.time()
    gen = torch.Generator().manual_seed(args.seed)
    first_value = 256 + len(SPECIALS)  # after the specials and the byte-fallback pieces
    for step in range(1, args.copy_warmup + 1):
        for group in opt.param_groups:
            group["lr"] = 1e-3 * min(1.0, step / 30)
        ids, tgt = copy_batch(gen, len(tokenizer), first_value)
        loss, _ = train_step(model, opt, ids, tgt)
        if step % 50 == 0:
            emit({"copy_step": step, "loss": round(float(loss), 5), "min": round((time.time() - t0) / 60, 2)})
    tokens = targets = 0
    loss_acc, loss_n = 0.0, 0
    model.train()
    for step in range(1, args.steps + 1):
        progress = step / args.steps
        horizon = sample_horizon(rng, progress, args.max_horizon)
        ids, tgt = make_batch(tokenizer, rng, horizon, args.batch_tokens, args.envs)
        if step <= args.warmup:
            lr = args.lr * step / args.warmup
        else:
            q = (step - args.warmup) / max(1, args.steps - args.warmup)
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * q)))
        for group in opt.param_groups:
            group["lr"] = lr
        loss, labels = train_step(model, opt, ids, tgt)
        tokens += ids.numel()
        targets += labels.numel()
        loss_acc += float(loss)
        loss_n += 1
        if step % 20 == 0 or step == 1:
            elapsed = time.time() - t0
            emit({"step": step, "loss": round(loss_acc / loss_n, 5), "lr": round(lr, 6), "horizon": horizon,
                  "batch": list(ids.shape), "tokens": tokens, "tok_per_s": round(tokens / elapsed), "min": round(elapsed / 60, 2)})
            loss_acc, loss_n = 0.0, 0
        if step % args.eval_every == 0 or step == args.steps:
            emit({"step": step, "heldout_call_acc": heldout_eval(model, tokenizer, args.envs), "min": round((time.time() - t0) / 60, 2)})
            save(model, tokenizer, args.out)
    emit({"event": "done", "min": round((time.time() - t0) / 60, 2), "tokens": tokens, "target_tokens": targets})
    log.close()


def save(model, tokenizer, out: Path) -> None:
    """Weights in bf16 (the checkpoint's native precision, as real models ship), tokenizer and template."""
    state = {k: v.detach().to(torch.bfloat16) for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # the same tensor as the embedding; stored once
    model.config.dtype = "bfloat16"
    model.save_pretrained(out, state_dict=state)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    main()
