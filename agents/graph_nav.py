"""GraphNav: walk a hidden coloured graph along a route of L colours, then name the node reached.

Every node has one outgoing edge of each colour (a random functional graph, so any colour
sequence can be walked from any node and the oracle is always defined). The task gives the start
node and L numbered colours. The only moving tool is `move(color)`, which returns the node
reached; there is no `neighbors` tool. The correct call at step i is `move(route_i)`, then
`answer(node)` with the node the agent actually stands on (conditional oracle: a wrong colour moves
the agent elsewhere and the walk is judged from there). `success()` requires the agent to stand
on the true target (the end of the route from the start) and to answer it.
"""

from __future__ import annotations

from qdrift.envs.base import ToolCall
from qdrift.envs.schema import function_tool
from qdrift.envs.toolenv import Knob, ToolEnv

COLORS = ["red", "blue", "green", "gold", "pink", "gray", "teal", "plum"]


class GraphNav(ToolEnv):
    name = "graph_nav"
    knobs = {
        "nodes": Knob(16, 2, 10_000, "number of nodes n0..n{nodes-1}"),
        "colors": Knob(3, 2, len(COLORS), "edge colours per node"),
        "echo": Knob(0, 0, 1, "1: each tool result repeats the next listed item (copy, not indexing)"),
    }

    def build(self, rng):
        n = self.knob("nodes")
        self.colors = COLORS[: self.knob("colors")]
        self.graph = {}
        for v in range(n):  # no self-loops: each edge leads to one of the other nodes, uniformly
            self.graph[f"n{v}"] = {c: f"n{(v + rng.randrange(1, n)) % n}" for c in self.colors}
        self.start = f"n{rng.randrange(n)}"
        self.route = [rng.choice(self.colors) for _ in range(self.horizon)]
        self.target = self.walk(self.start, self.route)

    def walk(self, node, route):
        for c in route:
            node = self.graph[node][c]
        return node

    def make_tools(self):
        return [
            function_tool("move", "Follow the edge of this colour; returns the node reached.",
                          {"color": {"type": "string", "enum": self.colors}}),
            function_tool("answer", "Name the node you are at and end the task.",
                          {"node": {"type": "string", "description": "a node such as n5"}}),
        ]

    def task(self):
        L = self.horizon
        lines = "\n".join(f"{i}: {c}" for i, c in enumerate(self.route, 1))
        return (f"Start at node {self.start}. Make these {L} moves in order, one move(color) call each; "
                f"each returns the node reached. Then call answer(node) with the node you end at.\n{lines}")

    def item(self, index):
        return self.route[index]

    def init_state(self):
        self.i = 0
        self.at = self.start
        self.answered: str | None = None

    def expected(self):
        if self.i < self.horizon:
            return ToolCall("move", {"color": self.route[self.i]})
        return ToolCall("answer", {"node": self.at})

    def error_suffix(self):
        return f"; {self.progress(self.i)}"

    def apply(self, call):
        if call.name == "answer":
            self.answered = call.arguments["node"]
            return "done", True
        self.i += 1
        self.at = self.graph[self.at][call.arguments["color"]]
        return f"{self.at}; {self.progress(self.i)}", False

    def success(self):
        return self.at == self.target and self.answered == self.target
