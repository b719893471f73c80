"""The organism's tokenizer: whole values as single tokens, built with the `tokenizers` library.

Why hand-built pieces rather than a trained BPE: copying a key or a number must be one induction
step (one token attends to one token), which a byte-pair vocabulary only gives by accident. The
model is a Unigram model whose every piece has the same score, so Viterbi segmentation picks the
fewest pieces: a key `k17`, a node `n5`, a file `f12`, an integer `-45` (|n| <= 999), a colour or
a file_system content word is always one token, and anything else still encodes exactly (printable
ASCII pieces, then UTF-8 byte fallback), so arbitrary model output and error messages round-trip.

No piece mixes a value with its surroundings (values are alphanumeric, the fixed chat pieces are
punctuation plus markup), so a value is tokenized the same way in the task text, in a tool result
and in a call, and the copy is the identity on token ids.

The chat template is ChatML with tools: the system turn lists the tools as `name(arg,...)`, calls
are Hermes `<tool_call>` JSON (exactly `qdrift.envs.parsers` hermes' canonical rendering), tool
results come back as `<tool_response>...</tool_response>` in a user turn. Every rendering is a
prefix of the rendering of a longer conversation, so the episode runner can reuse the KV cache.
"""

from __future__ import annotations

SPECIALS = ("<pad>", "<|im_end|>", "<unk>")
PAD, EOS, UNK = SPECIALS

# Markup the template and the Hermes call format write; each is one piece.
CHAT_PIECES = (
    "<|im_start|>system\n",
    "\n<|im_start|>user\n",
    "\n<|im_start|>user\n<tool_response>",
    "</tool_response>",
    "\n<|im_start|>assistant\n",
    "<|im_start|>",
    "\nTools:",
    '<tool_call>\n{"name": "',
    '", "arguments": {"',
    '", "arguments": {}}\n</tool_call>',
    '": "',
    '": ',
    '", "',
    ', "',
    '"}}\n</tool_call>',
    "}}\n</tool_call>",
    "\n</tool_call>",
    "<tool_call>",
    "</tool_call>",
)

COLORS = ("red", "blue", "green", "gold", "pink", "gray", "teal", "plum")

# file_system's contents with `words=1` (agents/file_system.py CONTENT_WORDS; a test keeps the two equal).
# Appended after every other piece, so the ids of the pieces before them did not move.
FILE_WORDS = tuple("""
atom bark bell boat bolt cake cave clay coin cord crab deer desk dove drum dune fern fish flag
foam fork frog gate goat harp hawk helm hill horn iris kite lake lamp leaf lime lion loom mint
moth nest oven pear pine pond rope ruby sage sail salt seal ship silk snow sock star tent tide
tree vase vine wave wolf wool yarn
""".split())

# English words of the environments' fixed texts and tool results (the task texts are written
# once per episode; the results are terse). Values are never word pieces.
WORDS = """
You execute a task step by step with tools Make exactly one tool call per turn the arguments
asks for Tool results are terse counts steps done Start key Call lookup on it result is next
Look up each returned in all then answer value with last lookups balance Apply these
transactions order apply amount finish final at node moves move color returns reached Then
you end Carry out file operations create path content append read rename src dst Table Each
names keys as turns Add their values to running total that starts and report new bal ok not
found exists error empty expected got argument integer string tool unknown missing episode
over no keys Return follows table Give Follow edge of this colour Name are Report after Create
or overwrite Append text Rename name such short returns Did mean Available valid JSON object
""".split()


def value_pieces() -> list[str]:
    """Every value the built-in environments (default knobs, L <= 479; file_system's words) write, one piece each."""
    pieces = [str(n) for n in range(-999, 1000)]
    pieces += [f"k{n}" for n in range(1000)] + [f"n{n}" for n in range(1000)] + [f"f{n}" for n in range(1000)]
    return pieces + list(COLORS) + list(FILE_WORDS)


def pieces() -> list[str]:
    """The ordered vocabulary (specials first, then byte fallback, characters, markup, words, values)."""
    out = list(SPECIALS) + [f"<0x{b:02X}>" for b in range(256)]
    out += [chr(c) for c in range(32, 127)] + ["\n", "\t"]
    out += list(CHAT_PIECES) + sorted(set(WORDS)) + value_pieces()
    seen: set[str] = set()
    return [p for p in out if not (p in seen or seen.add(p))]


# ChatML with tools. Written with explicit string outputs so that whitespace control and
# transformers' trim_blocks cannot change a byte.
CHAT_TEMPLATE = (
    "{%- if messages and messages[0].role == 'system' %}{%- set sys = messages[0].content %}"
    "{%- else %}{%- set sys = '' %}{%- endif %}"
    "{%- if sys or tools %}{{- '<|im_start|>system\\n' + sys }}"
    "{%- if tools %}{{- '\\nTools:' }}{%- for t in tools %}{%- set f = t.function if t.function is defined else t %}"
    "{{- ' ' + f.name + '(' }}{%- for p in (f.parameters.properties if f.parameters is defined else {}) %}"
    "{{- (',' if not loop.first else '') + p }}{%- endfor %}{{- ')' }}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' %}"
    "{%- elif m.role == 'tool' %}{{- '\\n<|im_start|>user\\n<tool_response>' + m.content + '</tool_response><|im_end|>' }}"
    "{%- elif m.role == 'assistant' %}{{- '\\n<|im_start|>assistant\\n' + (m.content or '') }}"
    "{%- for tc in (m.tool_calls or []) %}{%- set f = tc.function if tc.function is defined else tc %}"
    "{{- '<tool_call>\\n{\"name\": ' + (f.name | tojson) + ', \"arguments\": ' + (f.arguments | tojson) + '}\\n</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>' }}"
    "{%- else %}{{- '\\n<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '\\n<|im_start|>assistant\\n' }}{%- endif %}"
)


def build_tokenizer():
    """The organism's `PreTrainedTokenizerFast` (pad `<pad>`, eos `<|im_end|>`), with its chat template."""
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = [(p, -1.0) for p in pieces()]
    tok = Tokenizer(models.Unigram(vocab, unk_id=SPECIALS.index(UNK), byte_fallback=True))
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD, unk_token=UNK)
    fast.chat_template = CHAT_TEMPLATE
    return fast

