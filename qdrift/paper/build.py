"""`qdrift paper DIR` / `make -C paper`: run the paper's sweeps (resuming), then regenerate it.

DIR holds `paper.yaml` (title, the sweep files, the template, short labels for the specs) and
the template it names (Markdown with Jinja2). Each sweep's store is `DIR/runs/<sweep file
stem>.sqlite`, so a killed or partial run resumes. Every table, figure and number in the output
comes from the stored results of the sweep's current cells (cells of an older version of the
file are ignored) or from qdrift's own calculators (power, capacity); the template only words
them. Output: `DIR/out/paper.md`, `DIR/out/paper.html` and the figures beside them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from qdrift.paper.tables import ModelResults

KEYS = ("title", "sweeps", "template", "labels")


@dataclass
class PaperConfig:
    root: Path
    title: str
    sweeps: list[Path]
    template: Path
    labels: dict[str, str]  # canonical spec -> label


def load_config(root: str | Path) -> PaperConfig:
    """Read DIR/paper.yaml; every problem named with what is valid."""
    from qdrift.spec import QuantSpec

    root = Path(root)
    path = root / "paper.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: a paper directory holds paper.yaml (keys: {', '.join(KEYS)})")
    data = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(data) - set(KEYS))
    missing = [k for k in ("title", "sweeps", "template") if k not in data]
    if unknown or missing:
        raise ValueError(f"{path}: unknown keys {unknown}, missing keys {missing}; valid keys: {', '.join(KEYS)}")
    sweeps = [root / s for s in data["sweeps"]]
    template = root / data["template"]
    for p in [*sweeps, template]:
        if not p.is_file():
            raise FileNotFoundError(f"{path}: {p} does not exist")
    labels = {}
    for spec, label in (data.get("labels") or {}).items():
        labels["baseline" if spec == "baseline" else str(QuantSpec.parse(spec))] = str(label)
    return PaperConfig(root, str(data["title"]), sweeps, template, labels)


def run_sweeps(cfg: PaperConfig, progress: bool = True, allow_code_change: bool = False) -> None:
    """Run every cell of every sweep not yet done in its store (the sweep machinery resumes; a store of
    results other qdrift code measured is refused unless `allow_code_change`, as `run_sweep` does)."""
    from qdrift.store import Store
    from qdrift.sweep import load_sweep
    from qdrift.sweep.execute import run_sweep

    for path in cfg.sweeps:
        sweep = load_sweep(path)
        with Store(store_path(cfg, path)) as store:
            outcome = run_sweep(sweep, store, progress=progress, allow_code_change=allow_code_change)
        print(f"{path.name}: {outcome.summary()}")


def store_path(cfg: PaperConfig, sweep_path: Path) -> Path:
    return cfg.root / "runs" / f"{sweep_path.stem}.sqlite"


def collect(cfg: PaperConfig) -> tuple[dict[str, ModelResults], list[dict[str, Any]]]:
    """Results per model from each sweep's store, and per sweep: cells done / pending / failed."""
    from qdrift.store import UNRECORDED_CODE, Store
    from qdrift.sweep import load_sweep
    from qdrift.sweep.execute import unique_cells

    results, status, source = {}, [], {}
    for path in cfg.sweeps:
        sweep = load_sweep(path)
        keys = {c.key for c in unique_cells(sweep)}
        spath = store_path(cfg, path)
        if not spath.is_file():
            status.append({"sweep": path.name, "cells": len(keys), "done": 0, "failed": 0, "wall_s": 0.0,
                           "pending": len(keys), "code": ""})
            for model in sweep.models:
                results.setdefault(model, ModelResults(model, cfg.labels))
            continue
        with Store(spath) as store:
            store.check_integrity()
            per = {model: ModelResults.from_store(store, model, cfg.labels, keys) for model in sweep.models}
            codes = store.code_fingerprints()
        status.append({"sweep": path.name, "cells": len(keys), "done": sum(r.cells for r in per.values()),
                       "failed": sum(len(r.failed) for r in per.values()),
                       "wall_s": sum(r.wall_s for r in per.values()),
                       "pending": len(keys) - sum(r.cells for r in per.values()),
                       # which qdrift code measured the store (qdrift.code_fingerprint), oldest first
                       "code": " then ".join(c if c == UNRECORDED_CODE else c[:12] for c in codes)})
        for model, part in per.items():  # a model may be in several sweeps: its tasks are put together
            if model in results:
                results[model].merge(part, f"{source[model]} and {path.name}")
            else:
                results[model] = part
            source[model] = path.name if model not in source else f"{source[model]}, {path.name}"
    return results, status


def mde_rows(extra: dict[str, int]) -> str:
    """Minimum detectable paired differences for real benchmark sizes and this paper's cells."""
    from qdrift.paper.tables import fmt, md_table
    from qdrift.stats.power import BENCHMARKS, mde_paired, power_equivalence

    table = []
    for name, n in {**BENCHMARKS, **{k: v for k, v in extra.items() if v >= 1}}.items():
        cells = []
        for disc in (0.05, 0.10, 0.20):
            try:
                cells.append(fmt(100 * mde_paired(n, disc), 1))
            except ValueError:  # too few items to reach the power at this discordance
                cells.append("none reachable")
        table.append([name, f"{n:,}", *cells, fmt(power_equivalence(n, 0.01, 0.10), 2)])
    return md_table(["benchmark", "items", "MDE (points), 5% discordant", "10% discordant", "20% discordant",
                     "power of a ±1 point equivalence claim (10% discordant)"], table)


def equivalence_support(margin: float = 0.01, discordance: float = 0.10, power: float = 0.8) -> tuple[list, list]:
    """(benchmarks large enough for a ±margin equivalence claim with `power`, the ones that are not),
    at `discordance` items discordant and a true difference of 0: what the MDE table says in words."""
    from qdrift.stats.power import BENCHMARKS, power_equivalence

    able = [name for name, n in BENCHMARKS.items() if power_equivalence(n, margin, discordance) >= power]
    return able, [name for name in BENCHMARKS if name not in able]


def capacity_numbers() -> dict[str, float]:
    """The published serving figures recomputed by qdrift.capacity (assumptions in its tests)."""
    from qdrift.capacity import (
        H200_GIB,
        KIMI_K2_RESERVE_GIB,
        node_capacity,
        preset,
        weight_bytes,
        weight_plan,
    )

    common = dict(gpus=8, tp=8, gpu_mem_gib=H200_GIB, memory_utilization=0.9, activation_reserve_gib=KIMI_K2_RESERVE_GIB)
    bf16 = node_capacity(preset("kimi-k2"), weight_plan("int4"), "bf16", **common)
    fp8 = node_capacity(preset("kimi-k2"), weight_plan("int4"), "fp8", **common)
    gib = 2**30
    glm_fp8 = sum(weight_bytes(preset("glm-5"), weight_plan("fp8")).values()) / gib
    glm_int4 = sum(weight_bytes(preset("glm-5"), weight_plan("int4")).values()) / gib
    return {"kimi_bf16_tokens": bf16.max_cached_tokens, "kimi_fp8_tokens": fp8.max_cached_tokens,
            "kimi_kv_bytes_bf16": bf16.kv_bytes_per_token_per_gpu, "kimi_kv_bytes_fp8": fp8.kv_bytes_per_token_per_gpu,
            "glm_fp8_gib": glm_fp8, "glm_int4_gib": glm_int4, "glm_fp8_gib_gpu": glm_fp8 / 8,
            "glm_int4_gib_gpu": glm_int4 / 8}


def spec_rows(cfg: PaperConfig) -> str:
    """The precisions studied: label, spec string and its plain-language description."""
    from qdrift.paper.tables import md_table
    from qdrift.spec import QuantSpec
    from qdrift.spec.describe import describe_spec

    rows = []
    for spec, label in cfg.labels.items():
        if spec == "baseline":
            text = "nothing (fp32 weights, activations and KV cache)"
        else:  # the parts that quantize something; the spec's hash and module selection are shared by all
            parts = describe_spec(QuantSpec.parse(spec)).replace("\n", "; ").split("; ")
            text = "; ".join(p for p in parts if "not quantized" not in p and not p.startswith(("spec:", "modules:")))
        rows.append([label, f"`{spec}`", text])
    return md_table(["label", "spec", "what it quantizes"], rows)


def organism_parameters() -> int:
    """The embedded organism's parameter count, read from its shipped weights."""
    from math import prod

    from safetensors import safe_open

    from qdrift.organism import WEIGHTS

    with safe_open(str(WEIGHTS / "model.safetensors"), "pt") as f:
        return sum(prod(f.get_slice(k).get_shape()) for k in f.keys())


def render(cfg: PaperConfig, context: dict[str, Any], out: Path) -> Path:
    """The template rendered to out/paper.md, and that Markdown to out/paper.html."""
    import jinja2
    from markdown_it import MarkdownIt

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(cfg.template.parent), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    text = env.get_template(cfg.template.name).render(**context)
    md = out / "paper.md"
    md.write_text(text)
    body = MarkdownIt("commonmark").enable("table").render(text)
    html = (f"<!doctype html><html><head><meta charset='utf-8'><title>{cfg.title}</title><style>"
            "body{max-width:52em;margin:2em auto;font-family:Georgia,serif;line-height:1.45;padding:0 1em}"
            "table{border-collapse:collapse;font-size:0.85em;margin:1em 0}td,th{border:1px solid #bbb;"
            "padding:2px 6px}img{max-width:100%}code{font-size:0.9em}</style></head><body>"
            f"{body}</body></html>")
    (out / "paper.html").write_text(html)
    return md


def build_paper(root: str | Path, run: bool = True, progress: bool = True, allow_code_change: bool = False) -> Path:
    """Run (resume) the sweeps unless `run` is False, then write DIR/out/paper.{md,html} and figures.

    Without running, every sweep's store must exist (a partial one is fine: the paper says what is
    pending); otherwise nothing is written, so a checkout without the stores keeps its built paper.
    """
    from qdrift.envs.registry import TRAIN_SEEDS_BELOW
    from qdrift.paper import figures
    from qdrift.stats.power import mde_paired

    cfg = load_config(root)
    if run:
        run_sweeps(cfg, progress, allow_code_change)
    else:
        stores = [store_path(cfg, sweep) for sweep in cfg.sweeps]
        missing = [path for path in stores if not path.is_file()]
        if missing:  # rendering would replace the built paper with one that has no results
            raise FileNotFoundError(
                f"no store for {len(missing)} of the paper's sweeps: {', '.join(str(m) for m in missing)}; "
                "rendering without running needs every sweep's store (run the sweeps first: `make -C paper` "
                f"or `qdrift paper {cfg.root}`); {cfg.root / 'out'} was left as it is")
    results, status = collect(cfg)
    out = cfg.root / "out"
    out.mkdir(exist_ok=True)

    def fig(name: str, fn, *args) -> str | None:
        return fn(*args, out / f"{name}.png")

    context = {
        "title": cfg.title,
        "R": results,
        "status": status,
        "fig": fig,
        "figures": figures,
        "specs_table": spec_rows(cfg),
        "mde_table": mde_rows,
        "mde": lambda n, disc: 100 * mde_paired(n, disc),
        "equivalence_support": equivalence_support(),
        "capacity": capacity_numbers(),
        "built": time.strftime("%Y-%m-%d"),
        "held_out_from": TRAIN_SEEDS_BELOW,
        "organism_params": organism_parameters(),
    }
    path = render(cfg, context, out)
    print(f"paper: {path} and {path.with_suffix('.html')}")
    return path
