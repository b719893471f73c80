"""Stop sequences and streamed text: never send part of a stop sequence or half a character."""

from qdrift.serve.generation import _cut_at_stop, _held_back


def test_cut_at_the_earliest_stop_sequence():
    assert _cut_at_stop("abc END x STOP", ("STOP", "END")) == ("abc ", True)
    assert _cut_at_stop("abc", ("STOP",)) == ("abc", False)


def test_text_that_may_become_a_stop_sequence_is_held_back():
    assert _held_back("hello ST", ("STOP",)) == 2
    assert _held_back("hello S", ("STOP", "SX")) == 1
    assert _held_back("hello", ("STOP",)) == 0


def test_a_partial_utf8_character_is_held_back():
    assert _held_back("caf\ufffd", ()) == 1


def test_content_before_calls_leaves_what_the_template_writes_between_content_and_call():
    from qdrift.envs.parsers import HermesParser
    from qdrift.serve.generation import _content_before_calls

    parser = HermesParser()
    call = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'

    def content(text, separator):
        return _content_before_calls(text, parser.parse(text), parser, separator)

    assert content("k = 1\n" + call, "") == "k = 1\n"  # the organism's template writes no separator
    assert content("k = 1\n" + call, "\n") == "k = 1"  # Qwen2.5's writes one newline
    assert content("k = 1" + call, "\n") == "k = 1"  # a separator the model did not write: stripped
    assert content("k = 1\n" + call + "\nafter", "") == "k = 1\nafter"  # text after the call: the parser's
    assert content("k = 1\n" + call, None) == "k = 1"  # unknown separator
    assert content(call, "") is None and content("\n" + call, "") is None


def test_the_separator_is_read_from_the_template():
    from qdrift.envs.prompting import tool_prompt_for
    from qdrift.tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    # Qwen2.5's template writes "\n<tool_call>" after the content; the organism's "<tool_call>" (as
    # expressions: transformers renders templates with trim_blocks, which eats a newline after a tag).
    template = ("{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') }}"
                "{%- for tc in m.tool_calls or [] %}{{ SEP + '<tool_call>\\n' + (tc.function | tojson) + '\\n</tool_call>' }}"
                "{%- endfor %}{{ '<|im_end|>\\n' }}{%- endfor %}{%- if tools %}{{ '<tools>' }}{%- endif %}")
    tok.chat_template = template.replace("SEP", "'\\n'")
    prompt = tool_prompt_for(tok, mode="native")
    assert prompt.content_separator(tok) == "\n"
    tok.chat_template = template.replace("SEP", "''")
    assert prompt.content_separator(tok) == ""
