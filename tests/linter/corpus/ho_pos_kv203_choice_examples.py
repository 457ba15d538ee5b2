# expect: KV203
import random
from openai import OpenAI

EXAMPLES = [
    ("The delivery was late again.", "negative"),
    ("Great support, thanks!", "positive"),
    ("It works.", "neutral"),
    ("Terrible packaging.", "negative"),
]


def classify(client: OpenAI, text: str) -> str:
    shots = random.sample(EXAMPLES, 3)
    lines = [f"Text: {t}\nLabel: {l}" for t, l in shots]
    prompt = "Classify the sentiment.\n\n" + "\n\n".join(lines) + f"\n\nText: {text}\nLabel:"
    r = client.completions.create(model="gpt-3.5-turbo-instruct", prompt=prompt, max_tokens=2)
    return r.choices[0].text.strip()
