"""Native vs prompted tool prompting on tiny local tokenizers (no downloads).

Templates: (a) SmolLM2's ChatML (no tool support), (b) a Qwen2.5-style Hermes template with tool
support (the Qwen2.5-Instruct template's tool logic), (c) none, plus a Gemma-style template that
rejects the system role.
"""

from __future__ import annotations

import pytest

from qdrift.envs.base import ToolCall
from qdrift.envs.parsers import HermesParser, ParsedTurn, get_parser
from qdrift.envs.prompting import (
    ToolPrompt,
    assistant_message,
    supports_native_tools,
    tool_message,
    tool_prompt_for,
)

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

QWEN = r"""
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}
    {%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}{%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}{{- '\n' + message.content }}{%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}{{- tool_call.arguments | tojson }}{{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\n<tool_response>\n' }}{{- message.content }}{{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}{{- '<|im_end|>\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
"""

GEMMA = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)

SPECIALS = ["<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>", "<bos>"]


@pytest.fixture(scope="module")
def base_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ['<tool_call>\n{"name": "follow", "arguments": {"node": 3}}\n</tool_call>', "system user assistant tool"] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<|im_end|>",
                                   additional_special_tokens=SPECIALS[:4])


def _with_template(base, template, name):
    import copy

    tok = copy.deepcopy(base)
    tok.chat_template = template
    tok.name_or_path = name
    return tok


@pytest.fixture
def chatml(base_tokenizer):
    return _with_template(base_tokenizer, CHATML, "HuggingFaceTB/SmolLM2-135M-Instruct")


@pytest.fixture
def qwen(base_tokenizer):
    return _with_template(base_tokenizer, QWEN, "Qwen/Qwen2.5-0.5B-Instruct")


@pytest.fixture
def gemma(base_tokenizer):
    return _with_template(base_tokenizer, GEMMA, "google/gemma-2-2b-it")


@pytest.fixture
def bare(base_tokenizer):
    return _with_template(base_tokenizer, None, "tiny/no-template")


TOOLS = [
    {"type": "function", "function": {
        "name": "follow", "description": "Follow the pointer stored at a node.",
        "parameters": {"type": "object", "properties": {"node": {"type": "integer", "description": "node id"}},
                       "required": ["node"]}}},
    {"type": "function", "function": {
        "name": "answer", "description": "Give the final answer.",
        "parameters": {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}}},
]
START = [
    {"role": "system", "content": "You walk a linked list."},
    {"role": "user", "content": "Start at node 3 and follow 2 pointers."},
]


def turn(tp: ToolPrompt, raw: str, result: str = "7") -> list[dict]:
    """What the runner appends after a generated turn: assistant(raw) and the tool result."""
    parsed = tp.parser.parse(raw)
    msg = assistant_message(raw, parsed)
    return [msg, tool_message(result, parsed.calls[0].name, msg["tool_calls"][0]["id"])]


# ------------------------------------------------------------------------------------- selection


def test_supports_native_tools(chatml, qwen, bare):
    assert supports_native_tools(qwen)
    assert not supports_native_tools(chatml)
    assert not supports_native_tools(bare)


def test_auto_selection(chatml, qwen):
    tp = tool_prompt_for(qwen)
    assert tp.mode == "native" and isinstance(tp.parser, HermesParser) and not tp.prefill_opening
    assert tp.describe() == "native tools, hermes format"
    tp = tool_prompt_for(chatml, prefill_opening=True)
    assert tp.mode == "prompted" and tp.parser.name == "hermes"  # hermes by default for prompted
    assert tp.describe() == "prompted tools, hermes format, call opening '<tool_call>\\n' prefilled"
    tp = tool_prompt_for(chatml, parser="llama3_json")
    assert tp.parser.name == "llama3_json" and tp.describe() == "prompted tools, llama3_json format"
    assert tool_prompt_for(qwen, mode="prompted").mode == "prompted"


def test_prefill_extra_puts_the_name_opening_in_the_prompt(chatml):
    tp = tool_prompt_for(chatml, prefill_opening=True, prefill_extra='{"name": "')
    assert tp.prefilled == '<tool_call>\n{"name": "'
    msgs = [{"role": "user", "content": "hi"}]
    assert tp.render(chatml, msgs, TOOLS).endswith('assistant\n<tool_call>\n{"name": "')
    assert tp.completion_text('add", "arguments": {}}\n</tool_call>').startswith('<tool_call>\n{"name": "add"')
    assert tp.describe().endswith("""call opening '<tool_call>\\n{"name": "' prefilled""")


def test_prefill_that_is_not_a_call_prefix_is_refused(chatml):
    with pytest.raises(ValueError, match="not how a hermes call starts"):
        tool_prompt_for(chatml, prefill_opening=True, prefill_extra="[name=")
    with pytest.raises(ValueError, match="needs prefill_opening"):
        tool_prompt_for(chatml, prefill_extra='{"name": "')


def test_errors(chatml, bare):
    with pytest.raises(ValueError, match=r"SmolLM2-135M-Instruct.*does not support tools.*mode=\"prompted\""):
        tool_prompt_for(chatml, mode="native")
    with pytest.raises(ValueError, match="no chat template"):
        tool_prompt_for(bare)
    with pytest.raises(ValueError, match="no chat template"):
        tool_prompt_for(bare, mode="prompted")
    with pytest.raises(ValueError, match="mode must be"):
        tool_prompt_for(chatml, mode="xml")
    with pytest.raises(ValueError, match="Unknown tool-call format"):
        tool_prompt_for(chatml, parser="hermess")
    with pytest.raises(ValueError, match="no chat template"):
        ToolPrompt("prompted", get_parser("hermes"), False).render(bare, START, TOOLS)


# ------------------------------------------------------------------------------------- rendering


def test_prompted_rendering_describes_tools_and_format(chatml):
    tp = tool_prompt_for(chatml)
    text = tp.render(chatml, START, TOOLS)
    assert text.startswith("<|im_start|>system\nYou walk a linked list.\n\n# Tools")
    assert text.count("<|im_start|>system") == 1  # tools merged into the env's system message
    for name in ("follow", "answer", "Follow the pointer stored at a node.", '"required": ["node"]'):
        assert name in text
    assert HermesParser().render(ToolCall("follow", {"node": 0})) in text  # the exact call format
    assert text.endswith("<|im_start|>user\nStart at node 3 and follow 2 pointers.<|im_end|>\n<|im_start|>assistant\n")
    assert not tp.render(chatml, START, TOOLS, add_generation_prompt=False).endswith("assistant\n")
    # no system message from the env: qdrift's tool system message replaces SmolLM2's default
    text = tp.render(chatml, START[1:], TOOLS)
    assert text.startswith("<|im_start|>system\n# Tools") and "SmolLM" not in text


def test_prompted_other_formats(chatml):
    for fmt, snippet in [("llama3_json", '{"name": "follow", "parameters": {"node": 0}}'),
                         ("mistral", '[TOOL_CALLS] [{"name": "follow", "arguments": {"node": 0}}]')]:
        text = tool_prompt_for(chatml, parser=fmt).render(chatml, START, TOOLS)
        assert snippet in text


def test_prefill_opening(chatml, qwen):
    for tok in (chatml, qwen):
        tp = tool_prompt_for(tok, prefill_opening=True)
        text = tp.render(tok, START, TOOLS)
        assert text.endswith("<|im_start|>assistant\n<tool_call>\n")
        # no generation prompt, no opening
        assert not tp.render(tok, START, TOOLS, add_generation_prompt=False).endswith("<tool_call>\n")
        assert tp.completion_text('{"name": "follow", "arguments": {"node": 3}}\n</tool_call>') == \
            HermesParser().render(ToolCall("follow", {"node": 3}))


def test_native_rendering(qwen):
    tp = tool_prompt_for(qwen)
    text = tp.render(qwen, START, TOOLS)
    assert "<tools>\n" + '{"type": "function", "function": {"name": "follow"' in text
    raw = HermesParser().render(ToolCall("follow", {"node": 3}))
    hist = START + turn(tp, raw)
    text = tp.render(qwen, hist, TOOLS)
    assert text.count(raw) == 1  # rendered once, from tool_calls (raw content not duplicated)
    assert "<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in text
    # OpenAI-style string arguments are decoded for the template
    msg = assistant_message(raw, tp.parser.parse(raw))
    msg["tool_calls"][0]["function"]["arguments"] = '{"node": 3}'
    assert tp.render(qwen, START + [msg], TOOLS, add_generation_prompt=False).count(raw) == 1


def test_prompted_history_roles(chatml):
    tp = tool_prompt_for(chatml)
    raw = "I will follow it.\n" + HermesParser().render(ToolCall("follow", {"node": 3}))
    msgs = START + [assistant_message(raw, tp.parser.parse(raw)), tool_message("7", "follow"),
                    tool_message({"next": 9}, "follow")]
    text = tp.render(chatml, msgs, TOOLS)
    assert f"<|im_start|>assistant\n{raw}<|im_end|>\n" in text  # raw text, verbatim
    assert "<|im_start|>tool" not in text  # ChatML has no tool role: results go in ONE user message
    assert ("<|im_start|>user\n<tool_response>\n7\n</tool_response>\n<tool_response>\n{\"next\": 9}\n"
            "</tool_response><|im_end|>\n<|im_start|>assistant\n") in text


def test_prompted_system_folded_for_gemma(gemma):
    tp = tool_prompt_for(gemma)
    assert tp.mode == "prompted"
    text = tp.render(gemma, START, TOOLS)
    assert text.startswith("<bos><start_of_turn>user\nYou walk a linked list.\n\n# Tools")
    raw = HermesParser().render(ToolCall("follow", {"node": 3}))
    after = START + turn(tp, raw)
    assert tp.suffix(gemma, START, after, TOOLS) == (
        "<end_of_turn>\n<start_of_turn>user\n<tool_response>\n7\n</tool_response><end_of_turn>\n<start_of_turn>model\n")


# ----------------------------------------------------------------------------- prefix property


CANON1 = HermesParser().render(ToolCall("follow", {"node": 3}))
CANON2 = HermesParser().render(ToolCall("answer", {"value": "9"}))


@pytest.mark.parametrize("name", ["chatml", "qwen"])
def test_prefix_properties(name, request):
    tok = request.getfixturevalue(name)
    tp = tool_prompt_for(tok)
    after = START + turn(tp, CANON1)
    full = tp.render(tok, after, TOOLS)
    # (1) without and (2) with the generation prompt, the earlier rendering is a prefix
    assert full.startswith(tp.render(tok, START, TOOLS, add_generation_prompt=False))
    assert full.startswith(tp.render(tok, START, TOOLS, add_generation_prompt=True))
    # (3) ... and so is the earlier rendering plus the raw generated text (canonical here)
    assert full.startswith(tp.render(tok, START, TOOLS) + CANON1)


@pytest.mark.parametrize("name", ["chatml", "qwen"])
@pytest.mark.parametrize("prefill", [False, True])
def test_suffix_multi_turn(name, prefill, request):
    tok = request.getfixturevalue(name)
    tp = tool_prompt_for(tok, prefill_opening=prefill)
    hist = list(START)
    cache = tp.render(tok, hist, TOOLS)  # the prompt as first encoded
    for raw in (CANON1, CANON2):
        assert raw.startswith(tp.parser.opening)
        generated = raw[len(tp.parser.opening):] if prefill else raw
        assert tp.completion_text(generated) == raw
        cache += generated  # what the model appended to the cache
        after = hist + turn(tp, raw)
        s = tp.suffix(tok, hist, after, TOOLS)
        assert s.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n")
        assert s.endswith("<|im_start|>assistant\n" + (tp.parser.opening if prefill else ""))
        cache += s
        assert cache == tp.render(tok, after, TOOLS)
        # tokenizing the pieces matches tokenizing the whole (split at special tokens)
        pieces = tok(cache[: len(cache) - len(s)], add_special_tokens=False)["input_ids"] + \
            tok(s, add_special_tokens=False)["input_ids"]
        assert pieces == tok(cache, add_special_tokens=False)["input_ids"]
        hist = after


def test_suffix_non_canonical_raw(chatml, qwen):
    raw = '<tool_call>\n{"name": "follow",  "arguments": {"node": 3}}\n</tool_call>\n'  # extra spaces, newline
    # prompted: raw text is rendered verbatim, so the prefix always holds
    tp = tool_prompt_for(chatml)
    after = START + turn(tp, raw)
    assert tp.render(chatml, START, TOOLS) + raw + tp.suffix(chatml, START, after, TOOLS) == tp.render(chatml, after, TOOLS)
    # native: the template re-renders the call canonically, so the cache is not a prefix
    tp = tool_prompt_for(qwen)
    with pytest.raises(ValueError, match="not a prefix.*Re-encode"):
        tp.suffix(qwen, START, START + turn(tp, raw), TOOLS)
    # native, text before the call separated by one newline: holds
    raw = "Following node 3.\n" + CANON1
    after = START + turn(tp, raw)
    assert tp.render(qwen, START, TOOLS) + raw + tp.suffix(qwen, START, after, TOOLS) == tp.render(qwen, after, TOOLS)


def test_suffix_final_answer_and_errors(chatml, qwen):
    for tok in (chatml, qwen):
        tp = tool_prompt_for(tok)
        after = START + [{"role": "assistant", "content": "The answer is 9."}]
        assert tp.suffix(tok, START, after, TOOLS) == "<|im_end|>\n<|im_start|>assistant\n"
        with pytest.raises(ValueError, match="must be `before` followed"):
            tp.suffix(tok, START, START, TOOLS)
        with pytest.raises(ValueError, match="must be `before` followed"):
            tp.suffix(tok, START, [START[0], {"role": "user", "content": "edited"}] + after[2:], TOOLS)
        with pytest.raises(ValueError, match="first new message must be the assistant"):
            tp.suffix(tok, START, START + [tool_message("7", "follow")], TOOLS)
    tp = tool_prompt_for(chatml, prefill_opening=True)
    with pytest.raises(ValueError, match="including the prefilled opening"):
        tp.suffix(chatml, START, START + [{"role": "assistant", "content": '{"name": "follow"}'}], TOOLS)


def test_assistant_message_shape():
    raw = CANON1 + "\n" + CANON2
    parsed = HermesParser().parse(raw)
    msg = assistant_message(raw, parsed)
    assert msg["role"] == "assistant" and msg["content"] == raw
    assert [c["function"] for c in msg["tool_calls"]] == [
        {"name": "follow", "arguments": {"node": 3}}, {"name": "answer", "arguments": {"value": "9"}}]
    assert all(c["type"] == "function" and len(c["id"]) == 9 and c["id"].isalnum() for c in msg["tool_calls"])
    assert msg == assistant_message(raw, parsed)  # deterministic ids
    assert "tool_calls" not in assistant_message("bad", ParsedTurn([], "bad", "x", False))
    with pytest.raises(ValueError):
        assistant_message(raw, parsed, ids=["a"])


@pytest.mark.parametrize("name", ["chatml", "qwen"])
def test_suffix_with_consumed_eos(name, request):
    tok = request.getfixturevalue(name)
    tp = tool_prompt_for(tok)
    after = START + turn(tp, CANON1)
    plain = tp.suffix(tok, START, after, TOOLS)
    kept = tp.suffix(tok, START, after, TOOLS, consumed="<|im_end|>")  # backend kept the EOS token
    assert plain == "<|im_end|>" + kept
    with pytest.raises(ValueError, match="not a prefix"):
        tp.suffix(tok, START, after, TOOLS, consumed="</s>")


def test_native_assistant_without_tool_calls_is_verbatim(qwen):
    # a runner that stores only the raw text (no "tool_calls") gets it rendered verbatim, even in
    # native mode, so the prefix property holds for any raw text
    tp = tool_prompt_for(qwen)
    raw = '<tool_call>\n{"name": "follow",  "arguments": {"node": 3}}\n</tool_call>\n'
    after = START + [{"role": "assistant", "content": raw}, tool_message("7", "follow")]
    assert tp.render(qwen, START, TOOLS) + raw + tp.suffix(qwen, START, after, TOOLS) == tp.render(qwen, after, TOOLS)
