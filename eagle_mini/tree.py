"""The shape of a draft tree: who is whose parent, and the mask, positions and paths that follow.

EAGLE §3.1 drafts a *tree* of tokens instead of a chain and verifies all of it in one target
forward. Only the structure lives here; the drafter fills in tokens, verification walks the paths.

* Node 0 is the **root**: the last accepted token (the target's bonus token). Every other node has a
  parent with a smaller index, and nodes are sorted by depth, so a drafter can expand the tree one
  depth at a time and a parent's row is always ready before its children's.
* A node's **rank** is which top-k choice it is among its parent's candidates (0 = the most likely).
* EAGLE-1 writes a static tree as **choices**: one path of ranks per node, root implicit, e.g.
  `[[0], [1], [0, 0]]`. EAGLE-2 (§4) builds the tree per step; it hands us a parent list instead.

From the parent list follow the **tree attention mask** (a node sees its ancestors and itself),
the **position ids** (prefix length + depth, so siblings share a position) and the
**retrieve_paths** (one row per root-to-leaf path, the candidates greedy verification compares).

EAGLE-2's tree has no fixed shape: `DynamicTree` holds its settings (total tokens, depth, top-k)
and the drafter grows it per cycle. `tree_from_spec` reads every tree spec the package takes
("eagle1", "eagle2", "chain:K", "dynamic:T,D,K", JSON choices, a .json file).

Left out: tokens, scores and the prefix part of the mask (the target module adds the prefix).
"""
import json
import operator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from eagle_mini.errors import EagleMiniError

# A tree's shape is a small description read by Python loops: it stays on the CPU, and the target
# and the head move its mask and positions to their own device when they run it.
STRUCTURE = torch.device("cpu")

# EAGLE-1's default tree `mc_sim_7b_63` (reference implementation, branch v1, choices.py): 25 draft
# nodes, depth 5, nodes per depth 4/8/8/3/2, 15 leaves. It is lopsided towards rank 0 because the
# authors tuned it on measured acceptance rates, and top-1 drafts are accepted far more often.
EAGLE1_CHOICES = [
    [0], [1], [2], [3],
    [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2],
    [0, 0, 0, 0, 0], [0, 0, 0, 0, 1],
]

# Every spec form `tree_from_spec` reads, with its bounds; `methods.resolve_tree` adds the names of
# the methods whose trees it reads too.
SPEC_FORMS = ("'eagle1' or 'default' (EAGLE-1 mc_sim_7b_63), 'eagle2' (EAGLE-2's dynamic tree "
              "with its default settings, dynamic:16,5,4), 'chain:K' (K >= 1 draft tokens in a "
              "row), 'dynamic:TOTAL,DEPTH,TOPK' (EAGLE-2, TOTAL >= 2 nodes with the root, "
              "DEPTH >= 1, TOPK >= 1), a JSON list of choices such as '[[0], [1], [0, 0]]', a path "
              "to a .json file holding such a list, or a list of choices")


class UnknownTreeSpec(EagleMiniError):
    """A tree spec in none of the forms (`SPEC_FORMS`); its message lists them."""


def _as_int(x, what: str) -> int:
    # operator.index takes ints, numpy ints and integer 0-d tensors, and refuses floats and strings.
    try:
        return operator.index(x)
    except TypeError:
        raise EagleMiniError(f"{what} must be an integer, got {x!r}") from None


@dataclass(eq=False)
class Tree:
    """A draft tree's structure (EAGLE §3.1). Give `parents` and `ranks`; the rest is derived.

    parents:        [N] ints, parents[0] = -1, 0 <= parents[i] < i, depths non-decreasing
    ranks:          [N] ints, the top-k rank of each node among its parent's candidates; root 0
    children:       N lists of child indices, in index order
    depths:         LongTensor [N], root 0
    mask:           BoolTensor [N, N], mask[i, j] = j is i or an ancestor of i
    retrieve_paths: LongTensor [P, max_depth + 1], one row per leaf, node indices padded with -1,
                    rows sorted (depth-first order)

    >>> Tree([-1, 0, 0, 1], [0, 0, 1, 0]).retrieve_paths.tolist()
    [[0, 1, 3], [0, 2, -1]]
    """
    parents: list[int]
    ranks: list[int]
    children: list[list[int]] = field(init=False, repr=False)
    depths: torch.Tensor = field(init=False, repr=False)
    mask: torch.Tensor = field(init=False, repr=False)
    retrieve_paths: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self):
        self.parents = [_as_int(p, "a parent") for p in self.parents]
        self.ranks = [_as_int(r, "a rank") for r in self.ranks]
        parents, ranks = self.parents, self.ranks
        n = len(parents)
        if n == 0 or parents[0] != -1:
            raise EagleMiniError(f"parents[0] must be -1 (the root), got parents={parents}")
        if len(ranks) != n:
            raise EagleMiniError(f"got {n} parents but {len(ranks)} ranks")
        if ranks[0] != 0:
            raise EagleMiniError(f"the root's rank must be 0, got {ranks[0]}")
        self.children = [[] for _ in range(n)]
        depths = [0] * n
        for i in range(1, n):
            p, r = parents[i], ranks[i]
            if not 0 <= p < i:
                raise EagleMiniError(f"node {i} has parent {p}; a parent must come first "
                                     f"(0 <= parent < {i})")
            if r < 0:
                raise EagleMiniError(f"node {i} has negative rank {r}")
            if any(ranks[c] == r for c in self.children[p]):
                raise EagleMiniError(f"node {p} has two children of rank {r}")
            depths[i] = depths[p] + 1
            if depths[i] < depths[i - 1]:
                raise EagleMiniError(f"node {i} (depth {depths[i]}) comes after node {i - 1} "
                                     f"(depth {depths[i - 1]}); nodes must be sorted by depth")
            self.children[p].append(i)
        self.depths = torch.tensor(depths, dtype=torch.long, device=STRUCTURE)

        # A node sees exactly what its parent sees, plus itself; parents come first, so one pass.
        mask = torch.zeros(n, n, dtype=torch.bool, device=STRUCTURE)
        for i in range(n):
            if i > 0:
                mask[i] = mask[parents[i]]
            mask[i, i] = True
        self.mask = mask

        # Each leaf's row of the mask, read left to right, is its root-to-leaf path.
        leaves = [i for i in range(n) if not self.children[i]]
        paths = sorted(mask[i].nonzero().flatten().tolist() for i in leaves)
        width = max(depths) + 1
        self.retrieve_paths = torch.tensor([p + [-1] * (width - len(p)) for p in paths],
                                           dtype=torch.long, device=STRUCTURE)

    @property
    def num_nodes(self) -> int:
        """N, the root included: the number of tokens the target verifies in one forward."""
        return len(self.parents)

    @property
    def max_depth(self) -> int:
        """Depth of the deepest node; the drafter runs this many steps. 0 for a root-only tree."""
        return int(self.depths.max())

    @property
    def nodes_per_depth(self) -> list[int]:
        """Node counts at depths 0..max_depth, e.g. [1, 4, 8, 8, 3, 2] for EAGLE-1's tree."""
        return torch.bincount(self.depths).tolist()

    def positions(self, prefix_len: int) -> torch.Tensor:
        """Position ids [N] = prefix_len + depth (EAGLE §3.1): the root sits at `prefix_len`.

        >>> chain(2).positions(10).tolist()
        [10, 11, 12]
        """
        return self.depths + prefix_len

    def choices(self) -> list[list[int]]:
        """The EAGLE-1 choices of this tree: the rank path of every non-root node, in node order.

        >>> Tree([-1, 0, 0, 1], [0, 0, 1, 0]).choices()
        [[0], [1], [0, 0]]
        """
        rank_paths = [[]]
        for i in range(1, self.num_nodes):
            rank_paths.append(rank_paths[self.parents[i]] + [self.ranks[i]])
        return rank_paths[1:]

    def describe(self) -> str:
        """One line for logs, e.g. '26 nodes, depth 5, per depth 1/4/8/8/3/2, 15 paths, top-4'."""
        per_depth = "/".join(map(str, self.nodes_per_depth))
        return (f"{self.num_nodes} nodes, depth {self.max_depth}, per depth {per_depth}, "
                f"{len(self.retrieve_paths)} paths, top-{topk_needed(self)}")

    def __repr__(self) -> str:
        return f"Tree({self.describe()})"

    def __eq__(self, other) -> bool:
        # Everything else is derived from these two lists.
        if not isinstance(other, Tree):
            return NotImplemented
        return (self.parents, self.ranks) == (other.parents, other.ranks)


def from_parents(parents, ranks=None) -> Tree:
    """A tree from a parent list, as EAGLE-2's dynamic builder produces (EAGLE-2 §4).

    Without `ranks`, children are ranked 0, 1, ... in index order.

    >>> from_parents([-1, 0, 0, 1]).ranks
    [0, 0, 1, 0]
    """
    parents = list(parents)
    if ranks is None:
        seen = {}
        ranks = []
        for p in parents:
            ranks.append(seen.get(p, 0))
            seen[p] = ranks[-1] + 1
    return Tree(parents, list(ranks))


def from_choices(choices) -> Tree:
    """A tree from EAGLE-1 choices (EAGLE §3.1): one rank path per draft node, root implicit.

    Nodes are sorted by (depth, path), so parents come first and siblings by rank. Every prefix of
    a path must be a choice too, otherwise the node would hang from a missing parent.

    >>> from_choices([[1], [0], [0, 0]]).parents
    [-1, 0, 0, 1]
    """
    if not isinstance(choices, (list, tuple)):
        raise EagleMiniError(f"choices must be a list of paths, got {type(choices).__name__}")
    paths = []
    for c in choices:
        if not isinstance(c, (list, tuple)) or len(c) == 0:
            raise EagleMiniError(f"each choice must be a non-empty list of ranks (the root is "
                                 f"implicit), got {c!r}")
        paths.append(tuple(_as_int(r, f"a rank in choice {list(c)}") for r in c))
    paths.sort(key=lambda p: (len(p), p))
    index = {(): 0}
    parents, ranks = [-1], [0]
    for p in paths:
        if p in index:
            raise EagleMiniError(f"choice {list(p)} appears twice")
        if p[:-1] not in index:
            raise EagleMiniError(f"choice {list(p)} needs its prefix {list(p[:-1])} in the "
                                 f"choices too")
        index[p] = len(parents)
        parents.append(index[p[:-1]])
        ranks.append(p[-1])
    return Tree(parents, ranks)


def chain(k: int) -> Tree:
    """The root plus k top-1 drafts in a row: classic speculative decoding, EAGLE's chain ablation.

    >>> chain(3).parents
    [-1, 0, 1, 2]
    """
    k = _as_int(k, "the chain length")
    if k < 0:
        raise EagleMiniError(f"a chain needs k >= 0 draft tokens, got {k}")
    return from_choices([[0] * d for d in range(1, k + 1)])


def topk_needed(tree: Tree) -> int:
    """How many top-k candidates the drafter must compute per node: max child rank + 1 (0 if none).

    >>> topk_needed(from_choices(EAGLE1_CHOICES))
    4
    """
    return max(tree.ranks[1:], default=-1) + 1


def parse_tree(spec) -> Tree:
    """A tree from a user-facing spec: 'eagle1', 'default', 'chain:K', JSON choices, a .json file
    path, or a list of choices.

    >>> parse_tree("chain:2").choices()
    [[0], [0, 0]]
    """
    if isinstance(spec, Tree):
        return spec
    if isinstance(spec, (list, tuple)):
        return from_choices(spec)
    if isinstance(spec, str):
        s = spec.strip()
        if s.lower() in ("eagle1", "default"):
            return from_choices(EAGLE1_CHOICES)
        if s.lower().startswith("chain:") and s[6:].strip().isdigit():
            return chain(int(s[6:]))
        if s.startswith("["):
            return from_choices(_load_json(s, "tree spec"))
        if s.lower().endswith(".json"):
            path = Path(s).expanduser()
            if not path.is_file():
                raise EagleMiniError(f"tree file not found: {path}")
            return from_choices(_load_json(path.read_text(), str(path)))
    raise UnknownTreeSpec(f"tree spec must be one of: {SPEC_FORMS}; got {spec!r}")


def _load_json(text: str, where: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise EagleMiniError(f"{where} is not valid JSON: {e}") from None


@dataclass(frozen=True)
class DynamicTree:
    """EAGLE-2 tree settings (EAGLE-2 §4): `depth` draft levels, each expanding the `topk` best
    frontier nodes into `topk` children; the tree keeps `total_tokens` nodes, the root included.

    `depth` counts draft levels. The authors' code takes the root's top-k first and then runs
    `depth` more expansions, so their `depth=d` drafts d + 1 levels: their 60 / 5 / 10 is our
    `DynamicTree(60, 6, 10)`, on the command line `dynamic:60,6,10`.
    """
    total_tokens: int = 16
    depth: int = 5
    topk: int = 4

    def __post_init__(self):
        for name, least in (("total_tokens", 2), ("depth", 1), ("topk", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < least:
                raise EagleMiniError(f"DynamicTree {name} must be an integer >= {least}, got "
                                     f"{value!r} (a tree needs the root and at least one draft node)")

    def __str__(self) -> str:
        return f"dynamic:{self.total_tokens},{self.depth},{self.topk}"


def tree_from_spec(spec):
    """The one tree-spec parser: a spec as the CLI takes it -> what `generate` takes.
    "dynamic:TOTAL,DEPTH,TOPK" gives a `DynamicTree`; a `Tree` or `DynamicTree` is taken as it is;
    anything else goes to `parse_tree` ("eagle1", "chain:K", JSON, a file) and must draft a node.
    "eagle2" names EAGLE-2's tree with `DynamicTree`'s defaults, as "eagle1" names EAGLE-1's.
    Method names ("eagle-chain") are the table's (`eagle_mini.methods.resolve_tree`, at the edge).

    >>> tree_from_spec("dynamic:60,6,10"), tree_from_spec("eagle2")
    (DynamicTree(total_tokens=60, depth=6, topk=10), DynamicTree(total_tokens=16, depth=5, topk=4))
    """
    if isinstance(spec, DynamicTree):
        return spec
    if isinstance(spec, str) and spec.strip().lower() == "eagle2":
        return DynamicTree()
    if isinstance(spec, str) and spec.startswith("dynamic:"):
        try:
            total, depth, topk = (int(x) for x in spec.split(":", 1)[1].split(","))
        except ValueError:
            raise EagleMiniError(f"tree {spec!r}: use dynamic:TOTAL,DEPTH,TOPK, "
                                 "e.g. dynamic:16,5,4") from None
        return DynamicTree(total, depth, topk)
    tree = parse_tree(spec)
    if tree.num_nodes < 2:
        raise EagleMiniError(f"tree {spec!r} has no draft node: nothing would be drafted")
    return tree


def fit_tree(tree: Tree, max_nodes: int) -> tuple[Tree, list[int]]:
    """The part of `tree` that fits `max_nodes` nodes, the root included, and which of `tree`'s
    nodes it keeps (in the new tree's order): the first `max_nodes` nodes in breadth-first order,
    each node's children by rank. Down to the root alone, whose verification is a vanilla step.

    The kept nodes are closed under parents, and each keeps a *prefix* of its children in rank
    order, the order a drafter draws them and verification tries them. That keeps verification
    lossless (EAGLE §3.3, EAGLE-2 §4): greedy verification accepts a token only where it is the
    target's argmax, whatever the tree; EAGLE-2's rule (q(x) = 1) is lossless for any fixed
    children; EAGLE-1's rule (multi-round speculative sampling) is lossless when a node's children
    are its first k draws without replacement from q, for every k >= 0 (k = 0: the token is drawn
    from p), and a rank prefix of them is that with a smaller k. Any other cut could keep a later
    draw without an earlier one, which biases the p/q rule.

    >>> fit_tree(from_choices(EAGLE1_CHOICES), 6)[0].choices()
    [[0], [1], [2], [3], [0, 0]]
    >>> fit_tree(Tree([-1, 0, 0, 1], [0, 1, 0, 0]), 2)   # node 2 is rank 0: it goes first
    (Tree(2 nodes, depth 1, per depth 1/1, 1 paths, top-1), [0, 2])
    """
    max_nodes = _as_int(max_nodes, "max_nodes")
    if max_nodes < 1:
        raise EagleMiniError(f"a draft tree needs at least its root, got max_nodes={max_nodes}")
    if tree.num_nodes <= max_nodes:
        return tree, list(range(tree.num_nodes))
    kept = [0]
    for node in kept:   # grows while it is read: breadth-first
        kept += sorted(tree.children[node], key=lambda c: tree.ranks[c])
        if len(kept) >= max_nodes:
            break
    kept = kept[:max_nodes]
    index = {node: i for i, node in enumerate(kept)}
    parents = [-1] + [index[tree.parents[node]] for node in kept[1:]]
    return Tree(parents, [tree.ranks[node] for node in kept]), kept
