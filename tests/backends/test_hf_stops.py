"""Stop strings end a turn however many tokens the tokenizer spells them in."""

import torch

from qdrift.backends.hf import HFPolicy
from qdrift.envs.prompting import tool_prompt_for
from qdrift.tiny import tiny_model, tiny_tokenizer


class Scripted(torch.nn.Module):
    """Writes `script` greedily after each row's first feed, whatever it is fed (positions count)."""

    def __init__(self, inner, script):
        super().__init__()
        self.inner, self.script, self.config = inner, script, inner.config
        self.prompt_len = None

    def forward(self, input_ids, attention_mask, position_ids, cache, use_cache):
        if self.prompt_len is None:
            self.prompt_len = (position_ids[:, -1] + 1).tolist()
        logits = torch.zeros(*input_ids.shape, self.config.vocab_size)
        for b in range(input_ids.shape[0]):
            for t in range(input_ids.shape[1]):
                k = int(position_ids[b, t]) + 1 - self.prompt_len[b]
                if 0 <= k < len(self.script):
                    logits[b, t, self.script[k]] = 10.0
        return type("Out", (), {"logits": logits})()


def test_a_stop_string_spelt_in_many_tokens_ends_the_turn():
    tok = tiny_tokenizer()  # byte-level: `</tool_call>` is 12 tokens
    call = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    script = tok(call + " and then a lot more rambling text", add_special_tokens=False).input_ids
    assert len(tok("</tool_call>", add_special_tokens=False).input_ids) > 8
    policy = HFPolicy(Scripted(tiny_model("llama"), script), tok, tool_prompt_for(tok), max_new_tokens=len(script))
    tools = [{"type": "function", "function": {"name": "f", "description": "d",
                                               "parameters": {"type": "object", "properties": {}}}}]
    policy.start([([{"role": "user", "content": "hi"}], tools)], [0])
    out = policy.respond([0])[0]
    assert out.stop_reason == "stop_string" and out.text.endswith("</tool_call>") and "rambling" not in out.text
