"""The fine-tuned model's card: per-environment accuracy on held-out seeds, with intervals.

`card.json` (machine-readable) gives, for each environment setting (environment, knobs, horizon),
`per_step_accuracy` with its interval (`qdrift.stats.accuracy`: episode-clustered), episode success
with its Wilson interval, the held-out seeds and the horizon, whether the setting is in the
measurable regime (0.95-0.995), and the training summary (`finetune.json`: data, steps, tokens,
wall time, machine). `MODEL_CARD.md` beside it says the same for a reader, plus any notes the
settings file carries (what was tried, what was not reached).

A settings file (YAML)::

    seeds: 32                        # held-out seeds TRAIN_SEEDS_BELOW + i
    batch: 32
    notes: "..."                     # optional prose for the card
    settings:
      - {env: dict_sum, knobs: {vmax: 49}, horizon: 32}
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from qdrift.envs.calibrate import REGIME
from qdrift.envs.registry import TRAIN_SEEDS_BELOW, make_environment

CARD_JSON = "card.json"
CARD_MD = "MODEL_CARD.md"


def load_settings(path: str | Path) -> dict:
    """The settings file, checked: every setting builds an environment on a held-out seed."""
    import yaml

    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("settings"), list) or not data["settings"]:
        raise ValueError(f"{path}: expected a mapping with a non-empty 'settings' list")
    unknown = sorted(set(data) - {"seeds", "batch", "notes", "settings"})
    if unknown:
        raise ValueError(f"{path}: unknown key {unknown[0]!r}; valid: seeds, batch, notes, settings")
    for i, s in enumerate(data["settings"]):
        if not isinstance(s, dict) or not {"env", "horizon"} <= set(s) or set(s) - {"env", "horizon", "knobs"}:
            raise ValueError(f"{path}: settings[{i}] must have env, horizon and optional knobs; got {s!r}")
        try:
            make_environment(s["env"], horizon=s["horizon"], seed=TRAIN_SEEDS_BELOW, split="eval", **(s.get("knobs") or {}))
        except (ValueError, TypeError, FileNotFoundError) as e:
            raise ValueError(f"{path}: settings[{i}]: {e}") from e
    for key in ("seeds", "batch"):
        v = data.setdefault(key, 32)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{path}: {key} must be an integer >= 1, got {v!r}")
    return data


def evaluate_card(model_ref: str, model, tokenizer, settings: dict, log=print) -> dict:
    """Run every setting of `settings` (as `load_settings` returns it) greedily on held-out seeds; the card's dictionary."""
    from qdrift.backends.hf import HFPolicy
    from qdrift.envs.calibrate import measure
    from qdrift.envs.prompting import tool_prompt_for

    prompt = tool_prompt_for(tokenizer)
    n, batch = settings["seeds"], settings["batch"]
    seeds = list(range(TRAIN_SEEDS_BELOW, TRAIN_SEEDS_BELOW + n))
    rows = []
    for s in settings["settings"]:
        t0 = time.monotonic()
        m = measure(lambda: HFPolicy(model, tokenizer, prompt, max_new_tokens=64), s["env"], s["horizon"], seeds,
                    s.get("knobs") or {}, batch_size=batch, split="eval")
        m["seconds"] = round(time.monotonic() - t0, 1)
        m["in_regime"] = REGIME[0] <= m["per_step_accuracy"] <= REGIME[1]
        rows.append(m)
        if log:
            log(f"{s['env']} {s.get('knobs') or {}} L={s['horizon']}: per-step {m['per_step_accuracy']:.4f} "
                f"[{m['per_step_ci'][0]:.4f}, {m['per_step_ci'][1]:.4f}], success {m['success']:.2f} "
                f"({m['seconds']} s)")
    return {"model": model_ref, "tool_prompt": prompt.describe(), "decoding": "greedy", "regime": list(REGIME),
            "seeds": f"held out: {seeds[0]}..{seeds[-1]}", "settings": rows, "notes": settings.get("notes", "")}


def write_card(card: dict, training: dict | None, out: str | Path) -> Path:
    """Write card.json and MODEL_CARD.md into `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    card = {**card, "training": training}
    (out / CARD_JSON).write_text(json.dumps(card, indent=1) + "\n")
    (out / CARD_MD).write_text(render_markdown(card))
    return out


def render_markdown(card: dict) -> str:
    lines = [f"# {card['model']}: model card", ""]
    t = card.get("training")
    if t:
        c = t["config"]
        envs = ", ".join(f"{m['env']} (L {m['horizons'][0]}-{m['horizons'][1]}"
                         + "".join(f", {k} in {v}" for k, v in m["knobs"].items()) + ")" for m in c["mix"])
        m = t.get("machine", {})
        lines += [
            "## Training", "",
            f"- Base: `{c['base']}` (fingerprint {t.get('base_fingerprint', '?')[:16]}...); method {c['method']}, "
            f"r {c['lora_r']}, alpha {c['lora_alpha']} on {', '.join(c['lora_targets'])}"
            + (f"; quantization-aware ({c['qat']})" if c.get("qat") else "") + ".",
            f"- Data: oracle trajectories on training seeds (below the calibration range), rendered as the runner "
            f"feeds them ({c['prompt_mode']} tools, {c['parser']} calls), loss on the generated tokens only: {envs}.",
            f"- {t['steps']} steps of {c['episodes_per_step']} episodes, lr {c['lr']} (warmup {c['warmup_steps']}, "
            f"cosine), seed {c['seed']}, bf16 autocast {c['autocast_bf16']}: {t['tokens']:,} tokens "
            f"({t['target_tokens']:,} with a loss) in {t['train_seconds'] / 60:.1f} min, {t['tokens_per_second']} tokens/s.",
            f"- Machine: {m.get('cpu_count')} CPU cores, {m.get('platform')}, torch {m.get('torch')}.", "",
        ]
    lines += ["## Accuracy on held-out seeds", "",
              f"Greedy, {card['tool_prompt']}; seeds {card['seeds']}; 95% intervals (per-step: episode-clustered; "
              f"success: Wilson). The measurable regime is per-step accuracy {card['regime'][0]}-{card['regime'][1]}.", "",
              "| environment | knobs | L | per-step accuracy | 95% CI | success | 95% CI | episodes | in regime |",
              "|---|---|---|---|---|---|---|---|---|"]
    for s in card["settings"]:
        knobs = ", ".join(f"{k}={v}" for k, v in s["knobs"].items()) or "defaults"
        lines.append(f"| {s['env']} | {knobs} | {s['horizon']} | {s['per_step_accuracy']:.4f} | "
                     f"[{s['per_step_ci'][0]:.4f}, {s['per_step_ci'][1]:.4f}] | {s['success']:.2f} | "
                     f"[{s['success_ci'][0]:.2f}, {s['success_ci'][1]:.2f}] | {s['episodes']} | "
                     f"{'yes' if s['in_regime'] else 'no'} |")
    if card.get("notes"):
        lines += ["", "## Notes", "", card["notes"].strip()]
    return "\n".join(lines) + "\n"
