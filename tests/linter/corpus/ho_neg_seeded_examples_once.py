# expect: none
import random
from openai import OpenAI

POOL = [f"Example {i}" for i in range(40)]
_rng = random.Random(1234)
FEW_SHOT = _rng.sample(POOL, 5)


def ask(client: OpenAI, q: str):
    return client.chat.completions.create(model="gpt-4o", messages=[
        {"role": "system", "content": "Answer like the examples.\n" + "\n".join(FEW_SHOT)},
        {"role": "user", "content": q}])
