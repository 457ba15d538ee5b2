"""Few-shot classification with the radixgate SDK.

Instructions and examples are STATIC and keep their declared order (shuffling examples per
request is a classic way to make every request miss the cache); only the input changes.

    python examples/few_shot.py --base-url http://127.0.0.1:30000/v1
"""

from __future__ import annotations

import argparse

import radixgate as rg

EXAMPLES = [
    ("The parcel arrived two weeks late and the box was crushed.", "shipping"),
    ("I was charged twice for the same order.", "billing"),
    ("The left boot is a size smaller than the right one.", "product"),
    ("How do I change the e-mail address on my account?", "account"),
    ("The tracking link has not updated since Monday.", "shipping"),
    ("My refund has not reached my card after ten days.", "billing"),
    ("The tent pole snapped on the first night.", "product"),
    ("I cannot log in since I reset my password.", "account"),
]

CLASSIFIER = rg.Prompt(
    rg.system(
        "Classify the customer message into one of: shipping, billing, product, account. Answer with the label only."
    ),
    rg.examples(EXAMPLES),
    template="ticket-classifier",
)

INPUTS = [
    "Where is my package? It said two days.",
    "Why is there a second payment on my statement?",
    "The stove does not light any more.",
    "Please delete my account.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:30000/v1")
    args = parser.parse_args()
    print(f"static prefix: {CLASSIFIER.static_tokens()} tokens, hash {CLASSIFIER.static_prefix_hash}")
    with rg.Client(base_url=args.base_url) as client:
        for text in INPUTS:
            answer = client.chat(CLASSIFIER.extend(rg.user(text)), max_tokens=4, temperature=0.0)
            print(f"{text:<48} -> {answer.text.strip()[:20]!r:<24} cached {answer.hit_ratio:.0%}")


if __name__ == "__main__":
    main()
