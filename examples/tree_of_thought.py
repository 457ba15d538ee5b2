"""Tree-of-thought search with the radixgate SDK and the completions API.

One problem (STATIC) and branching continuations: every node's prompt is its parent's prompt plus
one more thought, so the whole tree shares the problem and each branch shares its parent's path.
The root streams its continuation to show `complete_stream`.

    python examples/tree_of_thought.py --base-url http://127.0.0.1:30000/v1 --branching 2 --depth 2
"""

from __future__ import annotations

import argparse

import radixgate as rg

PROBLEM = """
A shop ships orders from two warehouses. Warehouse A holds 120 tents and ships 15 a day.
Warehouse B holds 80 tents and ships 10 a day, but receives 20 new tents every fifth day.
Customers order 24 tents a day in total; orders that neither warehouse can serve wait a day.
On which day does the first order have to wait, and how many orders wait on that day?
Think in short numbered steps and check each step before the next one.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:30000/v1")
    parser.add_argument("--branching", type=int, default=2)
    parser.add_argument("--depth", type=int, default=2)
    args = parser.parse_args()
    problem = rg.Prompt(rg.system(PROBLEM), template="tree-of-thought")
    with rg.Client(base_url=args.base_url) as client:
        root = "Step 1:"
        stream = client.complete_stream(problem.extend(rg.user(root)), max_tokens=12, temperature=0.0)
        first = "".join(chunk.text for chunk in stream)
        print(f"root: {first[:60]!r} (cached {stream.usage.cached_tokens if stream.usage else 0} tokens)")
        frontier = [root + first]
        for level in range(1, args.depth + 1):
            children = []
            for path in frontier:
                for branch in range(args.branching):
                    prompt = problem.extend(rg.user(f"{path}\nStep {level + 1}, option {branch + 1}:"))
                    answer = client.complete(prompt, max_tokens=12, temperature=0.8, seed=branch)
                    children.append(f"{path}\nStep {level + 1}, option {branch + 1}:{answer.text}")
                    print(
                        f"{'  ' * level}depth {level} branch {branch + 1}: {answer.usage.cached_tokens}/"
                        f"{answer.usage.prompt_tokens} tokens cached"
                    )
            frontier = children


if __name__ == "__main__":
    main()
