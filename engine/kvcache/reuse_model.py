"""What the `reuse` eviction policy knows: how often a new node of each request class is seen again
soon, learned online from the tree's own past (no future knowledge, nothing a request does not
carry at arrival).

A node a request inserts gets the request's class: the bucket of the request's length in pages and
of how much of it was already cached (a new document; a short match; a question appended to a
known document). The model watches the node's first page for one turnover of the cache (the clock
ticks the tree's inserts take to fill what it holds): seen again, by a hit or by a later request
inserting it anew after it was evicted, counts for the class; unseen, against it. A node's credit
is then `HIT_CREDIT_TURNOVERS` turnovers times its class's measured rate while no request has hit
it, and that full credit once one has; the policy's key is last access + credit, so a node of a
class that rarely comes back leaves before older nodes of classes that do.

A credit is fixed when the node is inserted or hit (a rate that moves later does not change a key
already in the eviction heap, which stays valid: `eviction.py`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Hashable

from .tree_node import TreeNode

__all__ = ["ReuseModel"]

# Request length buckets, in pages; chosen on the first time half of Mooncake's synthetic trace
# (one page per trace block), where reuse is far from monotone in length.
LENGTH_EDGES_PAGES = (2, 6, 10, 12, 20, 30, 50, 70, 100)
DEEP_MATCH_PAGES = 10  # a match this long: a request appended to a known document
HIT_CREDIT_TURNOVERS = 5  # a hit node's credit; a never-hit node gets its class's rate of it
PRIOR_SEEN, PRIOR_UNSEEN = 1, 2  # a new class starts at a rate of 1/3
_IDENTITY_TOKENS = 16  # a node's first tokens (at least one page) name it in the watch list


class ReuseModel:
    def __init__(self, page_size: int):
        self.page_size = page_size
        self.num_seen: Counter[Hashable] = Counter()  # per class: watched nodes seen again in time
        self.num_unseen: Counter[Hashable] = Counter()  # per class: watched nodes not seen again
        self._rates: dict[Hashable, float] = {}  # rate() of each class counted so far, kept current
        # first tokens of a watched node -> (its class, the tick it was inserted); oldest first
        self.watch: dict[Hashable, tuple[Hashable, int]] = {}
        self.num_inserted = 0  # tokens in new nodes since the tree started
        self.hit_credit = 0  # clock ticks: what a hit node gets, at the current turnover

    def rate(self, request_class: Hashable) -> float:
        """The class's measured rate of being seen again within a turnover, from a prior of 1/3."""
        return self._rates.get(request_class, PRIOR_SEEN / (PRIOR_SEEN + PRIOR_UNSEEN))

    def _count(self, request_class: Hashable, seen: bool) -> None:
        (self.num_seen if seen else self.num_unseen)[request_class] += 1
        n = self.num_seen[request_class] + PRIOR_SEEN
        self._rates[request_class] = n / (n + self.num_unseen[request_class] + PRIOR_UNSEEN)

    def request_class(self, num_tokens: int, num_matched: int) -> tuple[int, int]:
        pages, matched = num_tokens // self.page_size, num_matched // self.page_size
        depth = 0 if matched == 0 else 1 if matched < DEEP_MATCH_PAGES else 2
        return bisect_right(LENGTH_EDGES_PAGES, pages), depth

    def _identity(self, node: TreeNode) -> Hashable:
        return node.namespace, node.depth - len(node.key), node.key[: max(self.page_size, _IDENTITY_TOKENS)]

    def _seen_again(self, identity: Hashable) -> None:
        watched = self.watch.pop(identity, None)
        if watched is not None:
            self._count(watched[0], seen=True)

    def stored(self, node: TreeNode, num_tokens: int, now: int, num_held: int) -> None:
        """`node` is new, inserted by a request of `num_tokens` whose first `depth - len(key)` were
        cached; `num_held`: device tokens in the tree, `now`: the tree's clock."""
        self.num_inserted += len(node.key)
        turnover = num_held * now // self.num_inserted
        self.hit_credit = HIT_CREDIT_TURNOVERS * turnover
        while self.watch:  # entries older than one turnover were not seen again in time
            identity, (request_class, inserted) = next(iter(self.watch.items()))
            if inserted >= now - turnover:
                break
            del self.watch[identity]
            self._count(request_class, seen=False)
        identity = self._identity(node)
        self._seen_again(identity)  # evicted, and now a request brought it back
        request_class = self.request_class(num_tokens, node.depth - len(node.key))
        self.watch[identity] = (request_class, now)
        node.reuse_credit = round(self.hit_credit * self.rate(request_class))

    def hit(self, node: TreeNode) -> None:
        """A request's match reached `node` (it counts as a hit)."""
        if node.hit_count == 1:
            self._seen_again(self._identity(node))
        node.reuse_credit = self.hit_credit
