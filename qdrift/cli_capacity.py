"""`qdrift capacity`: weight bytes, KV bytes per token and cached tokens per node for a model."""

from __future__ import annotations

import json
from pathlib import Path


def _shape(ref: str):
    from qdrift.capacity import PRESETS, preset, shape_from_config

    if ref in PRESETS:
        return preset(ref)
    path = Path(ref)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise SystemExit(f"qdrift: {ref!r} is neither a preset ({', '.join(PRESETS)}) nor a config.json file or model directory")
    return shape_from_config(json.loads(path.read_text()), name=ref, source=str(path))


def cmd_capacity(args) -> int:
    from qdrift.capacity import CLASSES, GB, GIB, node_capacity, weight_bytes, weight_plan

    try:
        shape = _shape(args.model)
        plan = weight_plan(args.weights, keep=args.keep)
        rows = weight_bytes(shape, plan)
        print(f"model: {shape.name}  ({shape.total_params / 1e9:,.2f} B parameters)" + (f"\nsource: {shape.source}" if shape.source else ""))
        for cls in CLASSES:
            if shape.params[cls]:
                print(f"  {cls:<15} {shape.params[cls] / 1e9:>10,.3f} B params  {plan.per_class[cls]:<9} {rows[cls] / GB:>9,.2f} GB {rows[cls] / GIB:>9,.2f} GiB")
        for kv in args.kv:
            cap = node_capacity(shape, plan, kv, args.gpus, args.tp, args.gpu_mem, args.mem_util, args.reserve)
            print(cap.render())
    except ValueError as e:
        raise SystemExit(f"qdrift: {e}") from None
    return 0


def add_parser(sub) -> None:
    from qdrift.capacity.node import H200_GIB  # plain arithmetic, no heavy imports

    p = sub.add_parser("capacity", help="weight bytes, KV bytes per token and max cached tokens on a node")
    p.add_argument("model", help="a preset (kimi-k2, glm-5, llama-3.1-70b, llama-3.1-8b), a config.json or a model directory")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--tp", type=int, default=8, help="tensor-parallel degree (gpus // tp replicas)")
    p.add_argument("--gpu-mem", type=float, default=H200_GIB,
                   help="GiB per GPU as nvidia-smi reports it (H200: 140.4, i.e. 143,771 MiB; H100 80GB: 79.6)")
    p.add_argument("--mem-util", type=float, default=0.9, help="fraction of GPU memory the engine may use (vLLM default 0.9)")
    p.add_argument("--reserve", type=float, default=0.0, help="GiB per GPU for activations, CUDA graphs, buffers")
    p.add_argument("--weights", default="bf16", help="bf16, fp16, fp32, fp8, int8, int4, int4g128, nvfp4, mxfp4")
    p.add_argument("--keep", nargs="*", default=None,
                   help="module classes kept in bf16 (default: by precision, see qdrift.capacity.plan)")
    p.add_argument("--kv", nargs="+", default=["bf16"], help="KV-cache precisions: bf16, fp16, fp32, fp8, fp8e5m2")
    p.set_defaults(func=cmd_capacity)
