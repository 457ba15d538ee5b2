"""The router bench's independent references: Belady's bound equals a brute-force optimum on tiny
inputs, and no split of the requests over two pools of the summed size beats it."""

from __future__ import annotations

import functools
import random

from radixgate.bench.router_bounds import PrefixLRU, belady_bound, lru_reference, positions


def _brute_force(prompts: list[tuple[str, list[int]]], capacity: int) -> float:
    """Every admit/bypass/evict choice over one cache of `capacity` token positions, the best kept."""
    refs, counted = [], []
    for namespace, ids in prompts:
        refs += positions(ids, namespace)
        counted += [True] * (len(ids) - 1) + [False]

    @functools.cache
    def best(i: int, cached: frozenset[int]) -> int:
        if i == len(refs):
            return 0
        if refs[i] in cached:
            return counted[i] + best(i + 1, cached)
        options = [best(i + 1, cached)]  # bypass
        if len(cached) < capacity:
            options.append(best(i + 1, cached | {refs[i]}))
        else:
            options += [best(i + 1, (cached - {old}) | {refs[i]}) for old in cached]
        return max(options)

    return best(0, frozenset()) / len(refs)


def _tiny_prompts(rng: random.Random, n: int) -> list[tuple[str, list[int]]]:
    heads = [[1, 2], [3, 4], [1, 5]]
    return [("t", rng.choice(heads) + [rng.randrange(3)]) for _ in range(n)]


def test_belady_bound_is_the_brute_force_optimum() -> None:
    rng = random.Random(3)
    for _ in range(12):
        prompts = _tiny_prompts(rng, 5)
        for capacity in (1, 2, 3):
            assert abs(belady_bound(prompts, capacity) - _brute_force(prompts, capacity)) < 1e-12


def _two_pool_lru(prompts: list[tuple[str, list[int]]], pool: int, rng: random.Random) -> float:
    """Any router: each prompt to a random one of two LRU prefix caches of `pool` tokens."""
    caches = [PrefixLRU(pool), PrefixLRU(pool)]
    hits = total = 0
    for namespace, ids in prompts:
        hits, total = hits + caches[rng.randrange(2)].serve(namespace, ids), total + len(ids)
    return hits / total


def test_no_split_over_two_pools_beats_the_bound_and_namespaces_share_nothing() -> None:
    rng = random.Random(5)
    templates = [[100 * t + i for i in range(30)] for t in range(6)]
    prompts = [("t", templates[rng.randrange(6)] + [rng.randrange(10**6) for _ in range(4)]) for _ in range(80)]
    bound = belady_bound(prompts, 2 * 70)
    for _ in range(20):
        assert _two_pool_lru(prompts, 70, rng) <= bound
    assert lru_reference(prompts, 2 * 70) <= bound
    assert belady_bound(prompts, 10**6) == lru_reference(prompts, 10**6) > 0.7  # no pressure: both see it all
    assert belady_bound([("a", [1, 2, 3]), ("b", [1, 2, 3])], 100) == 0.0  # another namespace: no hit
