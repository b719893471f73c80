"""Fine-tuning a pretrained causal LM to act in qdrift's environments.

Why: a quantization study needs a model whose baseline per-step accuracy is high but below 1; the
organism sits at the ceiling and SmolLM2-135M-Instruct at the floor. A short LoRA fine-tune (peft) on
oracle trajectories of the environments' training seeds, rendered exactly as the episode runner feeds
the model at evaluation, puts a real pretrained model between the two.

    qdrift finetune run smollm2-agent --out runs/smollm2-agent   # a shipped recipe, or a YAML file

Pieces: `config` (what a run is; its hash guards a resume), `data` (episodes as token ids with loss
masks, a pure function of the seed and the step, so a resumed run sees the same data in the same
order), `train` (the loop: bf16 autocast, checkpoints every few minutes, `kill -9` safe), `qat`
(int4 fake quantization of the merged LoRA weight in the forward pass, straight-through).
"""

from qdrift.finetune.config import FinetuneConfig, load_config

__all__ = ["FinetuneConfig", "load_config"]
