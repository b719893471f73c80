import pytest

from qdrift.envs.base import ToolCall
from qdrift.envs.parsers import get_parser
from qdrift.envs.prompting import tool_prompt_for
from qdrift.envs.registry import make_environment
from qdrift.organism.data import oracle_conversation
from qdrift.organism.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def pieces(tok, text):
    return tok.convert_ids_to_tokens(tok(text, add_special_tokens=False).input_ids)


@pytest.mark.parametrize("value", ["k17", "k999", "n5", "f12", "-45", "0", "999", "-999", "red", "plum", "wolf", "star"])
def test_values_are_one_token_in_every_context(tok, value):
    contexts = [f"Start key: {value}. Call", f"3/7 {value}", f'": "{value}"}}}}\n</tool_call>',
                f"\n12: {value}\n", f"{value}=3 "]
    for text in contexts:
        assert value in pieces(tok, text), (text, pieces(tok, text))


def test_larger_numbers_and_odd_text_round_trip(tok):
    for text in ["bal 123456", "k1234 n99999", "error: tool 'apply': argument 'amount' expected integer, got string '5'",
                 "ünïcødé ✓ \t tabs\nnew lines", '{"name": "x", "arguments": {}}', ""]:
        ids = tok(text, add_special_tokens=False).input_ids
        assert tok.decode(ids) == text
        assert tok.unk_token_id not in ids


def test_special_tokens(tok):
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<pad>"
    assert tok.pad_token_id != tok.eos_token_id
    assert pieces(tok, "a<|im_end|>b") == ["a", "<|im_end|>", "b"]


def test_template_lists_tools_and_is_native_hermes(tok):
    env = make_environment("file_system", horizon=2, seed=3)
    text = tok.apply_chat_template(env.reset(), tools=env.tools(), tokenize=False, add_generation_prompt=True)
    assert "\nTools: create(path,content) append(path,content) read(path) rename(src,dst)<|im_end|>" in text
    assert text.endswith("\n<|im_start|>assistant\n")
    prompt = tool_prompt_for(tok)
    assert prompt.mode == "native" and prompt.parser.name == "hermes"


@pytest.mark.parametrize("name", ["pointer_chase", "ledger", "graph_nav", "file_system", "dict_sum"])
def test_template_is_prefix_stable_over_an_episode(tok, name):
    env = make_environment(name, horizon=5, seed=11)
    messages = oracle_conversation(env)
    tools = env.tools()
    prompt = tool_prompt_for(tok)
    for n in range(2, len(messages)):
        if messages[n]["role"] != "assistant":
            continue
        before = prompt.render(tok, messages[:n], tools)
        after = prompt.render(tok, messages[: n + 1] + messages[n + 1: n + 2], tools)
        assert after.startswith(before + messages[n]["content"] + tok.eos_token)


def test_tool_calls_render_as_the_canonical_hermes_call(tok):
    call = ToolCall("apply", {"amount": -45})
    msgs = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "id": "a", "function": {"name": "apply", "arguments": {"amount": -45}}}]}]
    text = tok.apply_chat_template(msgs, tokenize=False)
    assert get_parser("hermes").render(call) + "<|im_end|>" in text


def test_file_words_are_the_environments_contents_appended_last():
    from agents.file_system import CONTENT_WORDS
    from qdrift.organism.tokenizer import FILE_WORDS, WORDS, pieces

    assert FILE_WORDS == CONTENT_WORDS
    assert pieces()[-len(FILE_WORDS):] == list(FILE_WORDS)  # earlier ids did not move
    assert not set(FILE_WORDS) & set(WORDS)
