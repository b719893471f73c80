"""FileSystem: carry out L numbered operations on a small in-memory file system.

The task lists L operations (`create f1 abc`, `append f1 xyz`, `read f1`, `rename f1 f2`); the
correct call at step i is the i-th listed operation, whatever the agent did before (each
schema-valid call is the agent's attempt at the next operation). `create` makes or overwrites a
file; `append` adds to the end; `read` returns the content; `rename` moves a file to a new name.
A failing operation (a missing file, a rename onto an existing name) is an observation such as
`f2 not found; next 4`, and the state is unchanged. The episode ends after L operations;
`success()` requires the final files and contents to equal the intended ones.

A content is three random letters by default; with `words=1` it is one word from `CONTENT_WORDS`
(64 four-letter nouns). Why the choice: copying a three-letter string means finding its first
letter by position and its next letters by order, among letters that repeat everywhere; a word is
one value, copied the way file names are. A model whose tokenizer makes every word one token
(the organism's) then faces the same kind of copy in every argument.
"""

from __future__ import annotations

import string

from qdrift.envs.base import ToolCall
from qdrift.envs.schema import function_tool
from qdrift.envs.toolenv import Knob, ToolEnv

PATH = {"type": "string", "description": "a file name such as f3"}
TEXT = {"type": "string", "description": "short text"}

CONTENT_WORDS = tuple("""
atom bark bell boat bolt cake cave clay coin cord crab deer desk dove drum dune fern fish flag
foam fork frog gate goat harp hawk helm hill horn iris kite lake lamp leaf lime lion loom mint
moth nest oven pear pine pond rope ruby sage sail salt seal ship silk snow sock star tent tide
tree vase vine wave wolf wool yarn
""".split())


class FileSystem(ToolEnv):
    name = "file_system"
    knobs = {
        "files": Knob(5, 1, 100, "at most this many files exist at once"),
        "maxlen": Knob(12, 3, 60, "no file grows past this many characters"),
        "echo": Knob(0, 0, 1, "1: each tool result repeats the next listed item (copy, not indexing)"),
        "words": Knob(0, 0, 1, "1: each content is one word of CONTENT_WORDS, 0: three random letters"),
    }

    def build(self, rng):
        cap, maxlen = self.knob("files"), self.knob("maxlen")
        fs: dict[str, str] = {}
        names = iter(range(1, 10**9))

        width = 4 if self.knob("words") else 3
        if maxlen < width:
            raise ValueError(f"file_system: maxlen={maxlen} is shorter than one content ({width} characters with "
                             f"words={self.knob('words')}); valid: maxlen >= {width}")

        def chunk() -> str:
            if self.knob("words"):
                return rng.choice(CONTENT_WORDS)
            return "".join(rng.choice(string.ascii_lowercase) for _ in range(3))

        self.ops: list[ToolCall] = []
        for _ in range(self.horizon):
            live = sorted(fs, key=lambda p: int(p[1:]))
            room = [p for p in live if len(fs[p]) + width <= maxlen]
            weights = {"create": 3, "append": 3 if room else 0, "read": 2 if live else 0, "rename": 1 if live else 0}
            kind = rng.choices(list(weights), weights=list(weights.values()))[0]
            if kind == "create":
                path = f"f{next(names)}" if len(live) < cap else rng.choice(live)
                op = ToolCall("create", {"path": path, "content": chunk()})
            elif kind == "append":
                op = ToolCall("append", {"path": rng.choice(room), "content": chunk()})
            elif kind == "read":
                op = ToolCall("read", {"path": rng.choice(live)})
            else:
                op = ToolCall("rename", {"src": rng.choice(live), "dst": f"f{next(names)}"})
            self.execute(fs, op)
            self.ops.append(op)
        self.final = fs

    @staticmethod
    def execute(fs: dict[str, str], op: ToolCall) -> str:
        """Apply `op` to `fs` in place; return the result text (without the step counter)."""
        a = op.arguments
        if op.name == "create":
            fs[a["path"]] = a["content"]
            return "ok"
        if op.name == "rename":
            src, dst = a["src"], a["dst"]
            if src not in fs:
                return f"{src[:20]} not found"
            if dst in fs:
                return f"{dst[:20]} exists"
            fs[dst] = fs.pop(src)
            return "ok"
        path = a["path"]
        if path not in fs:
            return f"{path[:20]} not found"
        if op.name == "append":
            fs[path] += a["content"]
            return "ok"
        return fs[path][:60] or "(empty)"

    def make_tools(self):
        return [
            function_tool("create", "Create (or overwrite) a file.", {"path": PATH, "content": TEXT}),
            function_tool("append", "Append text to a file.", {"path": PATH, "content": TEXT}),
            function_tool("read", "Return a file's content.", {"path": PATH}),
            function_tool("rename", "Rename a file to a new name.", {"src": PATH, "dst": PATH}),
        ]

    def item(self, index):
        op = self.ops[index]
        return " ".join([op.name, *op.arguments.values()])

    def task(self):
        lines = "\n".join(f"{i}: {self.item(i - 1)}" for i in range(1, self.horizon + 1))
        return (f"Carry out these {self.horizon} file operations in order, one tool call each "
                f"(create path content, append path content, read path, rename src dst).\n{lines}")

    def perfect_steps(self):
        return self.horizon

    def init_state(self):
        self.i = 0
        self.fs: dict[str, str] = {}

    def expected(self):
        return self.ops[min(self.i, self.horizon - 1)]

    def error_suffix(self):
        return f"; {self.progress(self.i)}"

    def apply(self, call):
        self.i += 1
        result = self.execute(self.fs, call)
        return f"{result}; {self.progress(self.i)}", self.i >= self.horizon

    def success(self):
        return self.i >= self.horizon and self.fs == self.final
