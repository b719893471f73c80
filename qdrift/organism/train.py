"""Train the model organism from scratch on oracle trajectories of the built-in environments.

    python -m qdrift.organism.train --out qdrift/organism/weights --steps 1400

Reproducible: one seed fixes the initialisation, the environments' training seeds and the batch
order; runs on the CPU (2 threads) in bf16 autocast. Horizons follow a curriculum: the longest
horizon sampled grows from 8 to `--max-horizon` over the first half of the steps, after which
batches draw horizons from 1 to the maximum, so contexts as long as the longest evaluated episode
are in the training distribution. Each batch holds about `--batch-tokens` tokens of episodes of one
horizon (five environments mixed), right-padded; the loss is on the generated call tokens only.
The learning rate warms up linearly, then follows a cosine to 10%. `--decision-weight` scales the
loss of each call's tool-name token (continue or stop); `--init` continues from saved weights.

The shipped weights come from three stages (weights/MODEL_CARD.md, runs 21, 22 and 24). The first, from
scratch: a copy warmup whose strings vary in length (so the repeat is found by content, which a
lookup by key needs), then every environment in its final format, dict_sum with random table keys,
and 30% of the steps dense recall and running sums (dict_sum's two skills):

    FS="file_system:echo=1,words=1"; DS="dict_sum:vmax=1,keyspace=1000"
    ENVS="pointer_chase ledger:echo=1 ledger:echo=1,amax=999 graph_nav:echo=1 $FS $FS"
    python -m qdrift.organism.train --out S1 --seed 21 --copy-warmup 1000 --copy-lengths 10 60 \
        --steps 1100 --lr 1e-3 --warmup 60 --ramp 0.3 --long-share 0.2 --decision-weight 10 \
        --first-call-weight 10 --last-call-weight 10 --batch-tokens 8000 --eval-every 150 \
        --eval-horizons 16 64 --envs $ENVS $DS $DS --dense-share 0.3 --dense-kinds recall recall sum \
        --dense-sum-vmax 1 --dense-recall-keyspace 1000

the second, from the first's weights: dict_sum four times in the mixture and half the batches
long (L = 120..200), since its lookups far from the table were the errors left:

    python -m qdrift.organism.train --init S1 --out S2 --seed 22 --steps 500 --lr 3e-4 --warmup 20 \
        --ramp 0 --long-share 0.5 --decision-weight 10 --first-call-weight 10 --last-call-weight 10 \
        --batch-tokens 8000 --eval-every 100 --eval-horizons 16 64 \
        --envs pointer_chase ledger:echo=1 ledger:echo=1,amax=999 graph_nav:echo=1 $FS $DS $DS $DS $DS \
        --dense-share 0.1 --dense-kinds recall sum --dense-sum-vmax 1 --dense-recall-keyspace 1000

and the third, from the second's weights: the same, with dict_sum five times, 70% of the batches
long, a lower rate and a RoPE base of 1e5 instead of 1e4 (the rest of the two-hour budget). Why
the base: of head_dim 32's 16 rotation frequencies, only the slowest turns by about a radian or
less over the ~6k tokens between dict_sum's table and its last turns at base 1e4; at 1e5 the
slowest four do, room for a match by content that holds over that distance. The same stage at
base 1e4 (run 23) left dict_sum at per-step 0.944 at L = 200; at 1e5 (run 24) 0.999 (model card):

    python -m qdrift.organism.train --init S2 --out S3 --seed 23 --steps 400 --lr 2e-4 --warmup 20 \
        --ramp 0 --long-share 0.7 --decision-weight 10 --first-call-weight 10 --last-call-weight 10 \
        --batch-tokens 8000 --eval-every 100 --eval-horizons 64 200 --rope-theta 1e5 \
        --envs pointer_chase ledger:echo=1 ledger:echo=1,amax=999 graph_nav:echo=1 $FS $DS $DS $DS $DS $DS \
        --dense-share 0.1 --dense-kinds recall sum --dense-sum-vmax 1 --dense-recall-keyspace 1000

`--dense-share` replaces that share of the steps with dense key-value recall and running-sum
batches (qdrift.organism.dense_tasks; `--dense-kinds` picks which, `--dense-sum-vmax` the addends'
range, `--dense-recall-keyspace` whether the recall tables' keys are k0, k1, ... in order or drawn
at random, like dict_sum's `keyspace` knob). A lookup by key needs an induction head (match the
key, copy what follows it), which the default copy warmup does not form: its repeat is always 21
tokens behind, so it is copied by position; `--copy-lengths 10 60` varies that distance (model
card, runs 20 and 21). dict_sum's oracle turns carry the environment's working before each call
(`worked_note`: `k4=1 -3 1 = -2`), so each token of a report is one lookup, copy or sum. The
earlier five-stage recipe, its probes and their results are in the model card and the history.

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

from qdrift.envs.registry import TRAIN_SEEDS_BELOW, make_environment, parse_env_entry
from qdrift.organism.data import encode_episode, pad_right, training_episode
from qdrift.organism.dense_tasks import check_recall_keyspace, dense_batch
from qdrift.organism.tokenizer import SPECIALS, build_tokenizer, value_pieces

# The default mixture; the shipped weights add ledger amounts to 999, file_system's one-token contents
# and dict_sum with random keys on the command line (the recipe above).
TRAINED = ("pointer_chase", "ledger", "graph_nav", "file_system")
RAMP = 0.5  # default fraction of the steps over which the longest sampled horizon grows from 8 to the maximum


ROPE_THETA = 10_000.0  # the RoPE base of a model built from scratch unless --rope-theta says otherwise


def check_rope_theta(theta: float) -> None:
    """Refuse a RoPE base that is not positive (its rotation frequencies would be undefined)."""
    if not theta > 0:
        raise ValueError(f"the RoPE base (rope_theta) must be positive, got {theta}")


def model_config(tokenizer, max_positions: int = 8192, rope_theta: float = ROPE_THETA):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=256, intermediate_size=768, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=4, head_dim=32, max_position_embeddings=max_positions,
        rope_theta=rope_theta, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )


def numeric_embedding_init(model, tokenizer, dims: int) -> None:
    """Write sinusoidal features of each integer token's value into the first `dims` embedding columns.

    Why: stopping needs `i == L` on the `i/L` counter and list indexing needs item `i + 1`; with
    value features (as in sinusoidal position encodings) both are linear maps of the embedding
    that one attention head can learn, where random embeddings make every number a separate fact.
    Periods run geometrically from 2.5 to 2,000; the rest of each row keeps its random init.
    """
    if dims <= 0:
        return
    if dims % 2:
        raise ValueError(f"--numeric-dims must be even (sine and cosine pairs), got {dims}")
    emb = model.get_input_embeddings().weight
    values = torch.arange(-999, 1000, dtype=torch.float64)
    ids = torch.tensor(tokenizer.convert_tokens_to_ids([str(int(v)) for v in values]))
    half = dims // 2
    periods = 2.5 * (2000 / 2.5) ** (torch.arange(half, dtype=torch.float64) / max(1, half - 1))
    angle = 2 * math.pi * values[:, None] / periods[None, :]
    feats = torch.cat([angle.sin(), angle.cos()], 1) * (model.config.initializer_range * math.sqrt(2))
    with torch.no_grad():
        emb[ids, :dims] = feats.to(emb.dtype)


def grow_vocabulary(model, tokenizer) -> int:
    """Give `model` embedding rows for pieces the tokenizer gained since it was saved; how many.

    New pieces are appended values (file_system's words), so each new row is drawn from a normal
    with the mean and covariance of the existing value rows (integers, keys, nodes, files, colours).
    Why not transformers' `mean_resizing`: it fits all rows, markup and bytes included, and a new
    value should start where the copy circuit reads values, not at the average token.
    """
    old, new = model.get_input_embeddings().weight.shape[0], len(tokenizer)
    if new <= old:
        return 0
    emb = model.get_input_embeddings().weight.detach()
    values = emb[tokenizer.convert_tokens_to_ids(value_pieces()[: -(new - old)])].double()
    dist = torch.distributions.MultivariateNormal(
        values.mean(0), covariance_matrix=torch.cov(values.T) + 1e-6 * torch.eye(values.shape[1], dtype=torch.float64))
    model.resize_token_embeddings(new, mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[old:] = dist.sample((new - old,)).to(emb.dtype)
    return new - old


def sample_horizon(rng: random.Random, progress: float, max_horizon: int, ramp: float = RAMP,
                   long_share: float = 0.0) -> int:
    """A batch's horizon: with probability `long_share` one from the top 40% of horizons (so a short
    continuation stage keeps long contexts in its mix), else half log-uniform, half uniform up to a
    top that ramps from 8 to `max_horizon` over the first `ramp` of the steps."""
    if long_share and rng.random() < long_share:
        return rng.randint(max(1, round(0.6 * max_horizon)), max_horizon)
    top = max_horizon if progress >= ramp else max(8, round(8 + (max_horizon - 8) * progress / ramp))
    if rng.random() < 0.5:
        return max(1, min(top, round(math.exp(rng.uniform(0, math.log(top))))))
    return rng.randint(1, top)


def make_batch(tokenizer, rng: random.Random, horizon: int, batch_tokens: int, envs=TRAINED,
               decision_weight: float = 1.0, first_call_weight: float = 1.0, last_call_weight: float = 1.0):
    """(ids, per-token loss weights): right-padded episodes of one horizon, weight 0 off the targets.

    The token after each call's `{"name": "` opening is the call's decision (continue or stop);
    it gets `decision_weight`. Why: the stopping call comes once per episode against L copy
    targets, so unweighted it is a vanishing share of the loss and was not learned beyond L = 2.
    Every token of each episode's first call is further multiplied by `first_call_weight`. Why:
    the first call is the only one made before any tool result (so before any echo of the next
    item): it must be read off the task's list, and it is one call per episode against L.
    `last_call_weight` does the same for each episode's last call (the answer: one per episode,
    copied from the last tool result, where the L calls before it copied items).
    """
    opening = tokenizer.convert_tokens_to_ids('<tool_call>\n{"name": "')
    seqs = []
    total = 0
    while True:
        name = rng.choice(envs)
        seq = training_episode(tokenizer, name, horizon, rng.randrange(TRAIN_SEEDS_BELOW))
        seqs.append(seq)
        total = max(len(s.ids) for s in seqs) * len(seqs)
        if total >= batch_tokens or len(seqs) >= 64:
            break
    ids, weight = pad_right([(s.ids, s.targets) for s in seqs], tokenizer.pad_token_id)
    eos = tokenizer.eos_token_id
    for i, s in enumerate(seqs):
        ends = [t for t, (tgt, tok) in enumerate(zip(s.targets, s.ids, strict=True)) if tgt and tok == eos]
        weight[i, s.targets.index(True): ends[0] + 1] *= first_call_weight
        weight[i, (ends[-2] + 1 if len(ends) > 1 else 0): ends[-1] + 1] *= last_call_weight
    decision = torch.zeros_like(weight, dtype=torch.bool)
    decision[:, 1:] = ids[:, :-1] == opening
    weight[decision & (weight > 0)] *= decision_weight
    return ids, weight


def check_copy_lengths(length: int, max_length: int) -> None:
    """Refuse a copy-length range that makes no sense, before any string is drawn."""
    if not 1 <= length <= max_length:
        raise ValueError(f"copy lengths {length}..{max_length}: need 1 <= MIN <= MAX")


def copy_batch(gen: torch.Generator, vocab: int, first: int, batch: int = 32, length: int = 20,
               max_length: int | None = None, pad_id: int = 0):
    """A random token string, a separator, and the same string again: the loss is on the repeat.

    Why: in the environments a value to copy is one target among ~20 fixed-format tokens, so the
    signal that forms a copying (induction) circuit is sparse, and from scratch the model sat on a
    plateau (it learned the call format, not the copy). This dense task forms the circuit in a few
    hundred steps; the environment trajectories then only have to point it at the right source.
    At one `length` the repeat is always the same distance behind, so the copy can be (and in the
    shipped weights is) made by position. With `max_length` each string draws its own length in
    `length..max_length` (right-padded with `pad_id`), which only a match by content solves: the
    induction head a lookup by key needs (model card, run 21).
    """
    check_copy_lengths(length, length if max_length is None else max_length)
    if max_length is None or max_length == length:
        x = torch.randint(first, vocab, (batch, length), generator=gen)
        ids = torch.cat([x, torch.full((batch, 1), first - 1), x], 1)
        weight = torch.zeros(ids.shape)
        weight[:, length + 1:] = 1.0
        return ids, weight
    rows = []
    for n in torch.randint(length, max_length + 1, (batch,), generator=gen).tolist():
        x = torch.randint(first, vocab, (n,), generator=gen).tolist()
        rows.append((x + [first - 1] + x, [0.0] * (n + 1) + [1.0] * n))
    return pad_right(rows, pad_id)


def target_logits(model, ids: torch.Tensor, weight: torch.Tensor):
    """Logits at the positions that predict a target token, those tokens and their loss weights.

    Right padding needs no attention mask: padding only follows the tokens that carry a loss.
    """
    hidden = model.model(input_ids=ids).last_hidden_state
    select = weight[:, 1:] > 0
    return model.lm_head(hidden[:, :-1][select]), ids[:, 1:][select], weight[:, 1:][select]


def train_step(model, opt, ids: torch.Tensor, weight: torch.Tensor):
    """One AdamW step on the weighted target tokens (bf16 autocast, gradient norm clipped to 1); (loss, labels)."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, labels, w = target_logits(model, ids, weight)
        loss = (F.cross_entropy(logits.float(), labels, reduction="none") * w).sum() / w.sum()
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


def load_for_training(path: Path, rope_theta: float | None = None):
    """Saved weights in fp32; a new RoPE base, if given, goes into the config before the rotary tables are built."""
    from transformers import AutoConfig, LlamaForCausalLM

    if rope_theta is not None:
        check_rope_theta(rope_theta)  # before anything is read
    config = AutoConfig.from_pretrained(path)
    if rope_theta is not None:
        config.rope_parameters = {**config.rope_parameters, "rope_theta": float(rope_theta)}
    return LlamaForCausalLM.from_pretrained(path, config=config, dtype=torch.float32, attn_implementation="sdpa")


def heldout_eval(model, tokenizer, envs=TRAINED, horizons=(16, 200), per=2) -> dict:
    model.eval()
    out = {}
    for entry in dict.fromkeys(envs):  # an entry listed twice (a double share) is evaluated once
        name, knobs = parse_env_entry(entry)
        for L in horizons:
            right = calls = 0
            for i in range(per):
                seq = encode_episode(tokenizer, make_environment(name, horizon=L, seed=TRAIN_SEEDS_BELOW + 7919 * i, **knobs,
                                                                 split="eval"))
                r, c = call_accuracy(model, tokenizer, torch.tensor(seq.ids), torch.tensor(seq.targets))
                right, calls = right + r, calls + c
            out[f"{entry}@{L}"] = round(right / calls, 4)
    model.train()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=1400)
    ap.add_argument("--batch-tokens", type=int, default=12_000)
    ap.add_argument("--max-horizon", type=int, default=200)
    ap.add_argument("--ramp", type=float, default=RAMP,
                    help="fraction of the steps over which the longest horizon grows from 8 (0: no ramp)")
    ap.add_argument("--long-share", type=float, default=0.0,
                    help="share of batches drawn from the top 40%% of horizons, whatever the ramp")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--envs", nargs="+", default=list(TRAINED))
    ap.add_argument("--init", type=Path, default=None, help="continue from saved weights (no copy warmup unless asked)")
    ap.add_argument("--copy-warmup", type=int, default=None,
                    help="steps of the dense copy task before the trajectories (default: 300 from scratch, 0 with --init)")
    ap.add_argument("--copy-lengths", type=int, nargs=2, default=[20, 20], metavar=("MIN", "MAX"),
                    help="length range of the copy task's strings; one length (the default) can be copied by "
                         "position, a range only by content")
    ap.add_argument("--numeric-dims", type=int, default=0,
                    help="embedding columns holding integer tokens' value features (from scratch only; 0: none)")
    ap.add_argument("--decision-weight", type=float, default=1.0,
                    help="loss weight of each call's tool-name token (the shipped weights' second stage used 10)")
    ap.add_argument("--first-call-weight", type=float, default=1.0,
                    help="loss weight multiplying every token of each episode's first call (made before any tool result)")
    ap.add_argument("--last-call-weight", type=float, default=1.0,
                    help="loss weight multiplying every token of each episode's last call (the answer)")
    ap.add_argument("--eval-horizons", nargs="+", type=int, default=[16, 200])
    ap.add_argument("--dense-share", type=float, default=0.0,
                    help="share of steps that train a dense recall or running-sum batch instead (dict_sum's skills)")
    ap.add_argument("--dense-batch", type=int, default=48, help="sequences in a dense batch")
    ap.add_argument("--dense-kinds", nargs="+", default=["recall", "sum"], choices=["recall", "sum"],
                    help="the dense tasks drawn (evenly) on dense steps")
    ap.add_argument("--dense-sum-vmax", type=int, default=9, help="largest addend magnitude in the dense running sums")
    ap.add_argument("--dense-recall-keyspace", type=int, default=0,
                    help="0: recall tables are k0, k1, ... in order; else keys drawn from k0..k{N-1} in random order")
    ap.add_argument("--rope-theta", type=float, default=None,
                    help="RoPE base; from scratch the default is 1e4, with --init the saved one unless given (a larger "
                         "base rotates the slow dimensions less over the long contexts, so a match by content holds further)")
    ap.add_argument("--stop-at", type=int, default=None,
                    help="save and stop after this step (the schedule still spans --steps)")
    args = ap.parse_args(argv)
    try:  # a bad value fails here, not at the first dense step minutes into the run
        check_recall_keyspace(args.dense_recall_keyspace)
    except ValueError as e:
        ap.error(f"--dense-recall-keyspace: {e}")
    lo, hi = args.copy_lengths
    try:
        check_copy_lengths(lo, hi)
    except ValueError as e:
        ap.error(f"--copy-lengths: {e}")
    if args.copy_warmup is None:
        args.copy_warmup = 0 if args.init is not None else 300
    if args.rope_theta is not None:
        try:
            check_rope_theta(args.rope_theta)
        except ValueError as e:
            ap.error(f"--rope-theta: {e}")
    for name in ("ramp", "long_share", "dense_share"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            ap.error(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(args, name)}")

    from transformers import LlamaForCausalLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(f"organism-train-{args.seed}")
    dense_rng = random.Random(f"organism-dense-{args.seed}")
    tokenizer = build_tokenizer()
    if args.init is not None:
        model = load_for_training(args.init, args.rope_theta)
        grown = grow_vocabulary(model, tokenizer)
    else:
        theta = ROPE_THETA if args.rope_theta is None else args.rope_theta
        model = LlamaForCausalLM._from_config(model_config(tokenizer, rope_theta=theta), attn_implementation="sdpa")
        grown = 0
        numeric_embedding_init(model, tokenizer, args.numeric_dims)
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

    emit({"event": "start", "params": n_params, "vocab": len(tokenizer), "grown": grown, **{k: str(v) for k, v in vars(args).items()},
          "torch": torch.__version__})
    t0 = time.time()
    gen = torch.Generator().manual_seed(args.seed)
    first_value = 256 + len(SPECIALS)  # after the specials and the byte-fallback pieces
    for step in range(1, args.copy_warmup + 1):
        for group in opt.param_groups:
            group["lr"] = 1e-3 * min(1.0, step / 30)
        ids, weight = copy_batch(gen, len(tokenizer), first_value, length=lo, max_length=hi,
                                 pad_id=tokenizer.pad_token_id)
        loss, _ = train_step(model, opt, ids, weight)
        if step % 50 == 0 or step == args.copy_warmup:
            emit({"copy_step": step, "loss": round(float(loss.detach()), 5), "min": round((time.time() - t0) / 60, 2)})
    tokens = targets = 0
    loss_acc, loss_n = 0.0, 0
    dense_loss = {"recall": [], "sum": []}
    model.train()
    for step in range(1, args.steps + 1):
        progress = step / args.steps
        # Dense steps draw from their own generator, so without them the episode batches are as before.
        dense = dense_rng.choice(args.dense_kinds) if args.dense_share and dense_rng.random() < args.dense_share else None
        if dense:
            horizon = None
            ids, weight = dense_batch(tokenizer, dense_rng, dense, args.dense_batch, args.dense_sum_vmax,
                                      args.dense_recall_keyspace)
        else:
            horizon = sample_horizon(rng, progress, args.max_horizon, args.ramp, args.long_share)
            ids, weight = make_batch(tokenizer, rng, horizon, args.batch_tokens, args.envs, args.decision_weight,
                                     args.first_call_weight, args.last_call_weight)
        if step <= args.warmup:
            lr = args.lr * step / args.warmup
        else:
            q = (step - args.warmup) / max(1, args.steps - args.warmup)
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * q)))
        for group in opt.param_groups:
            group["lr"] = lr
        loss, labels = train_step(model, opt, ids, weight)
        tokens += ids.numel()
        targets += labels.numel()
        value = float(loss.detach())
        if dense:
            dense_loss[dense].append(value)
        else:
            loss_acc += value
            loss_n += 1
        if step % 20 == 0 or step == 1:
            elapsed = time.time() - t0
            row = {"step": step, "loss": round(loss_acc / loss_n, 5) if loss_n else None, "lr": round(lr, 6), "horizon": horizon,
                   "batch": list(ids.shape), "tokens": tokens, "tok_per_s": round(tokens / elapsed), "min": round(elapsed / 60, 2)}
            for kind, losses in dense_loss.items():
                if losses:
                    row[f"{kind}_loss"] = round(sum(losses) / len(losses), 5)
                    losses.clear()
            emit(row)
            loss_acc, loss_n = 0.0, 0
        last = step == args.steps or step == args.stop_at
        if step % args.eval_every == 0 or last:
            emit({"step": step, "heldout_call_acc": heldout_eval(model, tokenizer, args.envs, args.eval_horizons), "min": round((time.time() - t0) / 60, 2)})
            save(model, tokenizer, args.out)
        if last:
            break
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
