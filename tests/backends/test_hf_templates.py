"""Templates the incremental policy cannot drive fail before or at the first extension, naming the way out."""

from __future__ import annotations

import pytest

from qdrift.backends.hf import HFPolicy, TemplateMismatch
from qdrift.envs.prompting import tool_prompt_for
from qdrift.envs.registry import make_environment
from qdrift.envs.runner import run_episodes
from qdrift.tiny import tiny_model, tiny_tokenizer

# The shape of Mistral-7B-Instruct-v0.3's template: native tools, a tool message needs a
# 9-character tool_call_id, and an assistant turn is written as " " + its trimmed content.
MISTRAL_LIKE = (
    "{%- if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    "{%- if CHECK_IDS and (message.tool_call_id is not defined or message.tool_call_id | length != 9) %}"
    "{{- raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{%- endif %}"
    "{{- '[TOOL_RESULTS] ' + message.content + '[/TOOL_RESULTS]' }}"
    "{%- elif message.role == 'assistant' %}{{- ASSISTANT + eos_token }}"
    "{%- else %}{{- '[INST] ' + message.content + '[/INST]' }}{%- endif %}"
    "{%- endfor %}"
    "{#- [TOOL_CALLS] #}"
)


def policy(check_ids: bool, assistant: str = "' ' + message.content | trim") -> HFPolicy:
    tok = tiny_tokenizer()
    tok.chat_template = MISTRAL_LIKE.replace("CHECK_IDS", "true" if check_ids else "false").replace("ASSISTANT", assistant)
    prompt = tool_prompt_for(tok)
    assert prompt.describe() == "native tools, mistral format"
    return HFPolicy(tiny_model("llama"), tok, prompt, max_new_tokens=4)


def env():
    return make_environment("ledger", horizon=2, seed=1_000_000, slack=1)


def test_a_template_that_refuses_the_runners_messages_fails_before_generating():
    p = policy(check_ids=True)
    with pytest.raises(TemplateMismatch, match=r"cannot render an assistant turn.*length 9.*mode=\"prompted\""):
        run_episodes(p, [env()])
    assert p._session is None  # nothing was prefilled


def test_a_template_that_reformats_assistant_text_fails_at_the_first_extension_with_the_way_out():
    with pytest.raises(TemplateMismatch, match=r"renders earlier turns differently.*raw text verbatim.*prompted"):
        run_episodes(policy(check_ids=False), [env()])


def test_prompted_tools_drive_a_model_whose_template_refuses_only_the_tool_messages():
    p = policy(check_ids=True, assistant="message.content")
    p.prompt = tool_prompt_for(p.tokenizer, mode="prompted")
    episodes, steps = run_episodes(p, [env()])
    assert len(steps) == episodes[0].steps >= 1
